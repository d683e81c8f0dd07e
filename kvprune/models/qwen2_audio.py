"""Qwen2-Audio-7B. Its Whisper encoder takes 30 s at a time, so long audio is cut into 30 s clips,
one placeholder run each; placeholders are expanded by the processor."""

from . import tiny
from .audio_format import WhisperChunkAudio
from .base import ModelFamily, register_family
from .parts import Prompting, Tiny
from .prompting import ChatFormat

build_inputs = ChatFormat(audio_item=lambda wave: {"type": "audio", "audio_url": ""}, chunk_seconds=30.0)


TINY = dict(
    audio_config=dict(**tiny.WHISPER, max_source_positions=64),  # 128-frame chunks of 32 tokens
    text_config=tiny.QWEN2_TEXT,
    audio_token_index=tiny.AUDIO_TOKEN,
)

QWEN2_AUDIO = register_family(
    ModelFamily(
        name="qwen2_audio",
        display_name="Qwen2-Audio",
        model_class="Qwen2AudioForConditionalGeneration",
        prompting=Prompting(
            audio_format=WhisperChunkAudio(),
            llm_tokens_per_second=25.0,
            build_inputs=build_inputs,
            long_audio="30 s chunks, one audio item each (its Whisper feature extractor truncates at 30 s; kvprune's prompt builder cuts them)",
            max_clip_seconds=30.0,
        ),
        tiny=Tiny(TINY),
    )
)
