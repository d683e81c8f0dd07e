"""Aero-1-Audio (lmms-lab, remote code): Qwen2-Audio's Whisper encoder, a linear projector and a
Qwen2ForCausalLM held as ``language_model``. Long audio is cut into 30 s chunks, one audio item
each, as its model card does. Loading it needs ``trust_remote_code=True``."""

from .base import ModelFamily, register_family
from .prompting import chat_template_inputs, split_chunks


def build_inputs(processor, waves, prompt):
    return chat_template_inputs(
        processor, split_chunks(waves, 30.0), prompt, audio_item={"type": "audio_url", "audio": "placeholder"}, audio_kwarg="audios"
    )


AERO = register_family(
    ModelFamily(
        name="aero",
        display_name="Aero-1-Audio",
        entry_paths={"AeroForConditionalGeneration": ""},
        decoder_paths=("language_model.model",),
        audio_token_attrs=("audio_token_index", "audio_token_id"),
        llm_tokens_per_second=25.0,
        model_types={"aero": ""},
        build_inputs=build_inputs,
    )
)
