"""Qwen3-Omni (30B-A3B): the thinker alone or inside the full model with talker; its decoder layers
are mixture-of-experts (routing is per token, so dropping tokens leaves the others' experts alone).

Audio goes in whole: the processor neither chunks nor truncates. The encoder convolves 1 s chunks
(2 * n_window frames) independently, 13 tokens each, and attends within windows of
``n_window_infer`` frames. Positions are 3-D mrope as in Qwen2.5-Omni; audio-only prompts number
them like text.
"""

from dataclasses import dataclass

from transformers import Qwen3OmniMoeProcessor

from . import tiny
from .audio_only import AudioOnlyProcessor, processor_loader
from .base import ModelFamily, register_family
from .parts import Loading, Prompting, Structure, Tiny
from .prompting import ChatFormat
from .qwen2_5_omni import OMNI_TOKENS, OMNI_VISUAL_TOKENS, TINY_MARKERS, OmniAudio

TOKENS_PER_CHUNK = 13  # transformers hard-codes it for its 100-frame chunks (n_window=50)


def _conv_tokens(frames: int) -> int:
    """Tokens three stride-2 convolutions leave of ``frames`` frames."""
    for _ in range(3):
        frames = (frames - 1) // 2 + 1
    return frames


class AudioOnlyQwen3OmniProcessor(AudioOnlyProcessor, Qwen3OmniMoeProcessor):
    """``Qwen3OmniMoeProcessor`` built from its feature extractor and tokenizer (see ``audio_only``);
    ``load_processor`` gives it images and video back without torchvision (``vision_frames``)."""

    token_attributes = OMNI_TOKENS


@dataclass(frozen=True)
class Qwen3OmniAudio(OmniAudio):
    """Like Qwen2.5-Omni's input (one row per clip, masked, framed by audio start/end tokens), with
    Qwen3-Omni's count: 13 tokens per whole 100-frame chunk, then the convolutions of the rest."""

    def frames(self, config, seconds):
        return max(1, round(seconds * 100))

    def piece_tokens(self, config, frames):
        chunk = 2 * config.audio_config.n_window
        rest = frames % chunk
        return (frames // chunk) * TOKENS_PER_CHUNK + (_conv_tokens(rest) if rest else 0)


TINY = dict(
    audio_config=dict(**tiny.WHISPER, output_dim=tiny.TEXT["hidden_size"], downsample_hidden_size=8),
    vision_config=dict(
        depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=tiny.TEXT["hidden_size"],
        deepstack_visual_indexes=[],
    ),
    text_config=dict(
        **tiny.TEXT, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3], mrope_interleaved=True),
    ),
    audio_token_id=tiny.AUDIO_TOKEN,
    image_token_id=tiny.IMAGE_TOKEN,
    video_token_id=tiny.VIDEO_TOKEN,
    position_id_per_seconds=13,  # one position per audio token (13/s), as its processor interleaves (the bare config says 25)
    **TINY_MARKERS,
)

QWEN3_OMNI = register_family(
    ModelFamily(
        name="qwen3_omni",
        display_name="Qwen3-Omni",
        model_class="Qwen3OmniMoeThinkerForConditionalGeneration",
        prompting=Prompting(
            audio_format=Qwen3OmniAudio(),
            llm_tokens_per_second=float(TOKENS_PER_CHUNK),
            build_inputs=ChatFormat(vision=True),
            long_audio="whole (no truncation); the encoder convolves 1 s chunks and attends within 8 s windows",
        ),
        tiny=Tiny(TINY),
        structure=Structure(
            entry_paths={"Qwen3OmniMoeForConditionalGeneration": "thinker"},
            # the audio tower projects into the LLM itself (transformers < 5.2x keeps it on the thinker)
            encoder_end_paths=("model.audio_tower", "audio_tower"),
            visual_token_attrs=OMNI_VISUAL_TOKENS,
            # deepstack: its first layers add visual features to the visual tokens' hidden states
            visual_feature_layers=lambda config: len(config.vision_config.deepstack_visual_indexes or ()),
        ),
        loading=Loading(
            # text answers only: do not build the talker and its vocoder
            load_kwargs={"Qwen3OmniMoeForConditionalGeneration": {"enable_audio_output": False}},
            load_processor=processor_loader(AudioOnlyQwen3OmniProcessor, vision=True),
        ),
        notes=(
            "Audio placeholders are framed by audio start/end tokens, which are never pruned. With images or "
            "video, press layers must come after its deepstack layers (3 in the checkpoints)."
        ),
    )
)
