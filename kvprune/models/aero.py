"""Aero-1-Audio (lmms-lab, remote code): Qwen2-Audio's Whisper encoder, a linear projector and a
Qwen2ForCausalLM held as ``language_model``; long audio is cut into 30 s chunks."""

from .base import ModelFamily, register_family

AERO = register_family(
    ModelFamily(
        name="aero",
        display_name="Aero-1-Audio",
        entry_paths={"AeroForConditionalGeneration": ""},
        decoder_paths=("language_model.model",),
        audio_token_attrs=("audio_token_index", "audio_token_id"),
        llm_tokens_per_second=25.0,
        model_types=("aero",),
    )
)
