"""Qwen2-Audio-7B. Its Whisper encoder takes 30 s at a time, so long audio is cut into 30 s clips,
one placeholder run each; placeholders are expanded by the processor."""

from .base import ModelFamily, register_family
from .prompting import chat_template_inputs, split_chunks


def build_inputs(processor, waves, prompt):
    return chat_template_inputs(processor, split_chunks(waves, 30.0), prompt, audio_item={"type": "audio", "audio_url": ""})


QWEN2_AUDIO = register_family(
    ModelFamily(
        name="qwen2_audio",
        display_name="Qwen2-Audio",
        entry_paths={"Qwen2AudioForConditionalGeneration": ""},
        decoder_paths=("model.language_model",),
        audio_token_attrs=("audio_token_id", "audio_token_index"),
        llm_tokens_per_second=25.0,
        model_types={"qwen2_audio": "Qwen2AudioForConditionalGeneration"},
        build_inputs=build_inputs,
    )
)
