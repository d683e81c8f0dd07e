"""Qwen2-Audio-7B. Its Whisper encoder takes 30 s at a time, so long audio is cut into 30 s clips,
one placeholder run each; placeholders are expanded by the processor."""

from . import tiny
from .audio_format import WhisperChunkAudio
from .base import ModelFamily, register_family
from .prompting import ChatFormat

build_inputs = ChatFormat(audio_item=lambda wave: {"type": "audio", "audio_url": ""}, chunk_seconds=30.0)


TINY = dict(
    audio_config=dict(**tiny.WHISPER, max_source_positions=64),  # 128-frame chunks of 32 tokens
    text_config=dict(model_type="qwen2", **tiny.TEXT),
    audio_token_index=tiny.AUDIO_TOKEN,
)

QWEN2_AUDIO = register_family(
    ModelFamily(
        name="qwen2_audio",
        display_name="Qwen2-Audio",
        entry_paths={"Qwen2AudioForConditionalGeneration": ""},
        decoder_paths=("model.language_model",),
        audio_token_attrs=("audio_token_id", "audio_token_index"),
        llm_tokens_per_second=25.0,
        encoder_start_paths=("model.audio_tower",),
        encoder_end_paths=("model.multi_modal_projector",),
        audio_format=WhisperChunkAudio(),
        model_class="Qwen2AudioForConditionalGeneration",
        tiny_kwargs=TINY,
        tiny_preset="tiny-qwen2-audio",
        model_types={"qwen2_audio": "Qwen2AudioForConditionalGeneration"},
        build_inputs=build_inputs,
        long_audio="30 s chunks, one audio item each (its Whisper feature extractor truncates at 30 s; kvprune's prompt builder cuts them)",
        max_clip_seconds=30.0,
    )
)
