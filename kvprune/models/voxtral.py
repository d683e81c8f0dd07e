"""Voxtral (Mini-3B, Small-24B): Whisper encoder, projector, Llama decoder; 30 s chunks."""

from .base import ModelFamily, register_family

VOXTRAL = register_family(
    ModelFamily(
        name="voxtral",
        display_name="Voxtral",
        entry_paths={"VoxtralForConditionalGeneration": ""},
        decoder_paths=("model.language_model",),
        audio_token_attrs=("audio_token_id",),
        llm_tokens_per_second=12.5,
        notes="A bare VoxtralConfig has audio_token_id=None; real checkpoints and the processor say 24.",
    )
)
