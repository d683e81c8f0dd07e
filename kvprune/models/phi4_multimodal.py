"""Phi-4-multimodal. Real checkpoints also need their speech LoRA adapter (peft), which is the
caller's to load; audio goes in whole."""

from .base import ModelFamily, register_family
from .prompting import chat_template_inputs

PHI4_MULTIMODAL = register_family(
    ModelFamily(
        name="phi4_multimodal",
        display_name="Phi-4-multimodal",
        entry_paths={"Phi4MultimodalForCausalLM": ""},
        decoder_paths=("model",),
        audio_token_attrs=("audio_config.audio_token_id", "audio_token_id"),
        llm_tokens_per_second=12.5,
        model_types={"phi4_multimodal": "Phi4MultimodalForCausalLM"},
        build_inputs=chat_template_inputs,
    )
)
