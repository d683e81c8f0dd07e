"""Qwen2-Audio-7B. Placeholders must be expanded by the processor (one token per audio frame)."""

from .base import ModelFamily, register_family

QWEN2_AUDIO = register_family(
    ModelFamily(
        name="qwen2_audio",
        display_name="Qwen2-Audio",
        entry_paths={"Qwen2AudioForConditionalGeneration": ""},
        decoder_paths=("model.language_model",),
        audio_token_attrs=("audio_token_id", "audio_token_index"),
        llm_tokens_per_second=25.0,
    )
)
