"""Phi-4-multimodal (the speech LoRA adapter of real checkpoints is loaded by peft, not here)."""

from .base import ModelFamily, register_family

PHI4_MULTIMODAL = register_family(
    ModelFamily(
        name="phi4_multimodal",
        display_name="Phi-4-multimodal",
        entry_paths={"Phi4MultimodalForCausalLM": ""},
        decoder_paths=("model",),
        audio_token_attrs=("audio_config.audio_token_id", "audio_token_id"),
        llm_tokens_per_second=12.5,
    )
)
