"""Qwen3-Omni (30B-A3B): the thinker alone or inside the full model with talker; its decoder layers
are mixture-of-experts (routing is per token, so dropping tokens leaves the others' experts alone).

Audio goes in whole: the processor neither chunks nor truncates. The encoder convolves 1 s chunks
(2 * n_window frames) independently, 13 tokens each, and attends within windows of
``n_window_infer`` frames. Positions are 3-D mrope as in Qwen2.5-Omni; audio-only prompts number
them like text.
"""

from dataclasses import dataclass

from transformers import Qwen3OmniMoeProcessor, Qwen3OmniMoeThinkerConfig

from . import tiny
from .audio_only import AudioOnlyProcessor, processor_loader
from .base import ModelFamily, register_family
from .prompting import ChatFormat
from .qwen2_5_omni import OMNI_TOKENS, OmniAudio

TOKENS_PER_CHUNK = 13  # transformers hard-codes it for its 100-frame chunks (n_window=50)


def _conv_tokens(frames: int) -> int:
    """Tokens three stride-2 convolutions leave of ``frames`` frames."""
    for _ in range(3):
        frames = (frames - 1) // 2 + 1
    return frames


class AudioOnlyQwen3OmniProcessor(AudioOnlyProcessor, Qwen3OmniMoeProcessor):
    """``Qwen3OmniMoeProcessor`` with only its feature extractor and tokenizer (see ``audio_only``)."""

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


MROPE = dict(rope_type="default", rope_theta=1_000_000.0, mrope_section=[24, 20, 20], mrope_interleaved=True)


def _thinker_30b_a3b() -> Qwen3OmniMoeThinkerConfig:
    """Qwen3-Omni-30B-A3B's thinker: a 48-layer MoE decoder (128 experts, 8 per token) of width 2048."""
    return Qwen3OmniMoeThinkerConfig(
        audio_config=dict(output_dim=2048),
        vision_config=dict(out_hidden_size=2048),
        text_config=dict(
            hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
            moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, vocab_size=151936,
            max_position_embeddings=65536, rope_parameters=MROPE,
        ),
        audio_end_token_id=151648,
        vision_start_token_id=151652,
    )


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
    audio_start_token_id=tiny.AUDIO_START,
    audio_end_token_id=tiny.AUDIO_END,
    image_token_id=tiny.IMAGE_TOKEN,
    video_token_id=tiny.VIDEO_TOKEN,
    vision_start_token_id=tiny.VISION_START,
)

QWEN3_OMNI = register_family(
    ModelFamily(
        name="qwen3_omni",
        display_name="Qwen3-Omni",
        entry_paths={
            "Qwen3OmniMoeThinkerForConditionalGeneration": "",
            "Qwen3OmniMoeForConditionalGeneration": "thinker",
        },
        # transformers < 5.2x keeps the text model at .model and the encoder on the thinker itself
        decoder_paths=("model.language_model", "model"),
        audio_token_attrs=("audio_token_id", "audio_token_index"),
        llm_tokens_per_second=float(TOKENS_PER_CHUNK),
        encoder_start_paths=("model.audio_tower", "audio_tower"),
        encoder_end_paths=("model.audio_tower", "audio_tower"),
        audio_format=Qwen3OmniAudio(),
        model_class="Qwen3OmniMoeThinkerForConditionalGeneration",
        tiny_kwargs=TINY,
        tiny_preset="tiny-qwen3-omni",
        bench_shapes={"qwen3-omni-30b-a3b": _thinker_30b_a3b},
        bench_note="the thinker alone (no talker); 30 B parameters, about 61 GB in bf16",
        model_types={
            "qwen3_omni_moe": "Qwen3OmniMoeForConditionalGeneration",
            "qwen3_omni_moe_thinker": "Qwen3OmniMoeThinkerForConditionalGeneration",
        },
        build_inputs=ChatFormat(),  # one {"type": "audio"} item per clip, in prompt order
        load_processor=processor_loader(AudioOnlyQwen3OmniProcessor),
        # text answers only: do not build the talker and its vocoder
        load_kwargs={"Qwen3OmniMoeForConditionalGeneration": {"enable_audio_output": False}},
        long_audio="whole (no truncation); the encoder convolves 1 s chunks and attends within 8 s windows",
        notes=(
            "Audio placeholders are framed by audio start/end tokens, which are never pruned. With images or "
            "video, press layers must come after its deepstack layers (3 in the checkpoints)."
        ),
    )
)
