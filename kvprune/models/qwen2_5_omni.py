"""Qwen2.5-Omni (3B, 7B): the thinker alone or inside the full model with talker.

Audio goes in whole (no chunking): the processor's feature extractor covers up to its
``chunk_length`` (300 s on the released checkpoints) and the encoder windows it internally. Images
and videos go in too; a video with its sound track is interleaved with it in 2 s chunks
(``use_audio_in_video``), and presses with a visual scope prune the video and image tokens.
"""

from dataclasses import dataclass

import torch
from transformers import Qwen2_5OmniProcessor

from . import tiny
from .audio_format import AudioFormat, padding_mask, whisper_tokens
from .audio_only import AudioOnlyProcessor, processor_loader
from .base import ModelFamily, register_family
from .parts import Loading, Prompting, Structure, Tiny
from .prompting import ChatFormat

OMNI_TOKENS = (
    "image_token", "audio_token", "video_token", "vision_bos_token", "vision_eos_token",
    "audio_bos_token", "audio_eos_token", "image_token_id", "audio_token_id", "video_token_id",
)


class AudioOnlyOmniProcessor(AudioOnlyProcessor, Qwen2_5OmniProcessor):
    """``Qwen2_5OmniProcessor`` built from its feature extractor and tokenizer (see ``audio_only``);
    ``load_processor`` gives it images and video back without torchvision (``vision_frames``)."""

    token_attributes = OMNI_TOKENS


load_processor = processor_loader(AudioOnlyOmniProcessor, vision=True)
#: the Omni families' visual placeholders (a press with scope "video" or "audio+video" prunes them)
OMNI_VISUAL_TOKENS = {"video": ("video_token_id", "video_token_index"), "image": ("image_token_id", "image_token_index")}


@dataclass(frozen=True)
class OmniAudio(AudioFormat):
    """One input per clip, 100 frames/s, 4 frames per token (25 tokens/s), each clip framed by audio
    start/end tokens. A frame count that is an exact multiple of the encoder's 2*n_window window
    trips its chunking (seen on transformers 5.17), so such counts lose one frame."""

    def frames(self, config, seconds):
        frames = super().frames(config, seconds)
        return frames - 1 if frames % (2 * config.audio_config.n_window) == 0 else frames

    def piece_tokens(self, config, frames):
        return whisper_tokens(frames)

    def features(self, config, clip_frames, generator=None):
        width = max(clip_frames)
        mels = torch.randn(len(clip_frames), config.audio_config.num_mel_bins, width, generator=generator)
        return dict(input_features=mels, feature_attention_mask=padding_mask(clip_frames, width).long())

    def placeholders(self, config, audio_token_id, n_tokens):
        run = super().placeholders(config, audio_token_id, n_tokens)
        return [config.audio_start_token_id, *run, config.audio_end_token_id]


#: the markers both Omni thinkers' configs name alike (Qwen2.5-Omni, Qwen3-Omni), at their tiny ids
TINY_MARKERS = dict(
    audio_start_token_id=tiny.AUDIO_START, audio_end_token_id=tiny.AUDIO_END, vision_start_token_id=tiny.VISION_START
)
TINY = dict(
    audio_config=dict(**tiny.WHISPER, output_dim=tiny.TEXT["hidden_size"], n_window=8, max_source_positions=1500),
    vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=tiny.TEXT["hidden_size"]),
    text_config=dict(**tiny.TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])),
    audio_token_index=tiny.AUDIO_TOKEN,
    image_token_index=tiny.IMAGE_TOKEN,
    video_token_index=tiny.VIDEO_TOKEN,
    **TINY_MARKERS,
)

QWEN2_5_OMNI = register_family(
    ModelFamily(
        name="qwen2_5_omni",
        display_name="Qwen2.5-Omni",
        model_class="Qwen2_5OmniThinkerForConditionalGeneration",
        prompting=Prompting(
            audio_format=OmniAudio(),
            llm_tokens_per_second=25.0,
            build_inputs=ChatFormat(vision=True),
            long_audio="whole, windowed inside the encoder; the checkpoints' feature extractor truncates at 300 s",
            max_clip_seconds=300.0,
        ),
        tiny=Tiny(TINY),
        structure=Structure(
            entry_paths={"Qwen2_5OmniForConditionalGeneration": "thinker"},
            # the audio tower projects into the LLM itself (transformers < 5.2x keeps it on the thinker)
            encoder_end_paths=("model.audio_tower", "audio_tower"),
            visual_token_attrs=OMNI_VISUAL_TOKENS,
        ),
        loading=Loading(
            # text answers only: do not build the talker and its vocoder
            load_kwargs={"Qwen2_5OmniForConditionalGeneration": {"enable_audio_output": False}},
            load_processor=load_processor,
        ),
        notes="Audio placeholders are framed by audio start/end tokens, which are never pruned.",
    )
)
