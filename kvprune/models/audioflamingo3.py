"""Audio Flamingo 3 (NVIDIA): a Whisper-style encoder with a final average pool, a two-layer
projector and a Qwen2.5-7B decoder.

Its processor cuts each audio into 30 s windows (20 at most: longer audio is truncated at 600 s),
runs them through the encoder as rows of one batch, and gives the whole audio ONE run of ``<sound>``
placeholders, 750 per full window (25 tokens/s). It takes one audio per prompt (or none: text only).
"""

from . import tiny
from .audio_format import WhisperChunkAudio
from .base import ModelFamily, register_family
from .parts import Prompting, Tiny
from .prompting import ChatFormat

MAX_SECONDS = 600.0  # the processor's max_audio_len: 20 windows of 30 s


# its encoder takes whole 30 s windows: a shorter last window is padded, not cut to the longest
_CHAT = ChatFormat(audio_padding="max_length")


def build_inputs(processor, waves, prompt):
    if len(waves) > 1:
        raise ValueError(
            f"Audio Flamingo 3's processor takes one audio per prompt, not {len(waves)}; "
            "join the clips into one waveform or ask about them in separate prompts."
        )
    return _CHAT(processor, waves, prompt)


TINY = dict(
    audio_config=dict(
        num_mel_bins=tiny.MELS, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, hidden_size=32,
        max_source_positions=64,  # 128-frame windows of 32 tokens
    ),
    text_config=tiny.QWEN2_TEXT,
    audio_token_id=tiny.AUDIO_TOKEN,
)

AUDIO_FLAMINGO_3 = register_family(
    ModelFamily(
        name="audioflamingo3",
        display_name="Audio Flamingo 3",
        model_class="AudioFlamingo3ForConditionalGeneration",
        prompting=Prompting(
            audio_format=WhisperChunkAudio(mask_name="input_features_mask"),
            llm_tokens_per_second=25.0,
            build_inputs=build_inputs,
            long_audio="30 s windows batched through the encoder, one placeholder run per audio; truncated at 600 s",
            max_clip_seconds=MAX_SECONDS,
        ),
        tiny=Tiny(TINY),
    )
)
