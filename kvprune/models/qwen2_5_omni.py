"""Qwen2.5-Omni (3B, 7B): the thinker alone or inside the full model with talker."""

from .base import ModelFamily, register_family

QWEN2_5_OMNI = register_family(
    ModelFamily(
        name="qwen2_5_omni",
        display_name="Qwen2.5-Omni",
        entry_paths={
            "Qwen2_5OmniThinkerForConditionalGeneration": "",
            "Qwen2_5OmniForConditionalGeneration": "thinker",
        },
        decoder_paths=("model.language_model", "model"),
        audio_token_attrs=("audio_token_index", "audio_token_id"),
        llm_tokens_per_second=25.0,
        notes="Audio placeholders are framed by audio start/end tokens, which are never pruned.",
    )
)
