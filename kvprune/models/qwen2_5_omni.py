"""Qwen2.5-Omni (3B, 7B): the thinker alone or inside the full model with talker.

Audio goes in whole (no chunking): the processor's feature extractor covers up to its
``chunk_length`` (300 s on the released checkpoints) and the encoder windows it internally.
"""

from .base import ModelFamily, register_family
from .prompting import chat_template_inputs


def build_inputs(processor, waves, prompt):
    return chat_template_inputs(processor, waves, prompt)


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
        model_types={
            "qwen2_5_omni": "Qwen2_5OmniForConditionalGeneration",
            "qwen2_5_omni_thinker": "Qwen2_5OmniThinkerForConditionalGeneration",
        },
        build_inputs=build_inputs,
        # text answers only: do not build the talker and its vocoder
        load_kwargs={"Qwen2_5OmniForConditionalGeneration": {"enable_audio_output": False}},
        notes="Audio placeholders are framed by audio start/end tokens, which are never pruned.",
    )
)
