"""What ``kvprune bench`` builds of each model family: the configs of real checkpoints' shapes (random
weights, nothing downloaded), the name of the tiny config's preset, and what a reader of the tables
must know about them. ``presets.py`` turns these into the ``PRESETS`` registry.

The families themselves (``kvprune.models``) say nothing about speed measurements: a family whose
shapes are not registered here still gets its tiny preset, ``tiny-<name>`` (underscores as dashes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import (
    AudioFlamingo3Config,
    Gemma3nConfig,
    GraniteSpeechConfig,
    Phi4MultimodalConfig,
    PreTrainedConfig,
    Qwen2_5OmniThinkerConfig,
    Qwen3OmniMoeThinkerConfig,
    VoxtralConfig,
)

from kvprune.models import ModelFamily
from kvprune.models.aero import AeroConfig
from kvprune.registry import Registry


@dataclass(frozen=True)
class BenchShapes:
    """One family's presets: ``real`` preset name -> config of a checkpoint's shape, the ``tiny``
    preset's name (empty: ``tiny-<family name>``) and a ``note`` shown under their tables."""

    family: str
    real: dict[str, Callable[[], PreTrainedConfig]] = field(default_factory=dict)
    tiny: str = ""
    note: str = ""

    @property
    def tiny_preset(self) -> str:
        return self.tiny or "tiny-" + self.family.replace("_", "-")


#: family name -> its presets
SHAPES: Registry[BenchShapes] = Registry("bench shapes of family")


def register_shapes(shapes: BenchShapes) -> BenchShapes:
    return SHAPES.register(shapes.family, shapes)


def shapes_of(family: ModelFamily) -> BenchShapes:
    """The presets registered for ``family``, or its tiny preset alone."""
    return SHAPES.get(family.name) if family.name in SHAPES else BenchShapes(family.name)


# -- Qwen2.5-Omni ----------------------------------------------------------------------------------------
OMNI_MROPE = dict(rope_type="default", rope_theta=1_000_000.0, mrope_section=[16, 24, 24])  # as the checkpoints
VISION_START = 151652  # a bare config lacks it, but position ids are computed from it even without vision


def _omni_thinker(text: dict, width: int) -> Qwen2_5OmniThinkerConfig:
    """The thinker of the checkpoints: audio and vision encoders project to the text width; the
    vision tower is built (as loading a checkpoint would) at its real width 1280, not the config
    default 3584, so that memory numbers include the right weights."""
    return Qwen2_5OmniThinkerConfig(
        text_config=text,
        audio_config=dict(output_dim=width),
        vision_config=dict(hidden_size=1280, out_hidden_size=width),
        vision_start_token_id=VISION_START,
    )


def _omni_7b() -> Qwen2_5OmniThinkerConfig:
    return _omni_thinker(text=dict(rope_parameters=OMNI_MROPE), width=3584)


def _omni_3b() -> Qwen2_5OmniThinkerConfig:
    """Qwen2.5-3B text model; the audio encoder is the 7B's, projecting to 2048."""
    text = dict(
        hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
        intermediate_size=11008, vocab_size=151936, rope_parameters=OMNI_MROPE,
    )
    return _omni_thinker(text=text, width=2048)


register_shapes(BenchShapes("qwen2_5_omni", {"qwen2.5-omni-7b": _omni_7b, "qwen2.5-omni-3b": _omni_3b}, tiny="tiny-omni"))

# -- Phi-4-multimodal: the default config is the released shape --------------------------------------------
register_shapes(BenchShapes(
    "phi4_multimodal", {"phi4-mm": Phi4MultimodalConfig}, tiny="tiny-phi4",
    note="without the speech LoRA adapter real checkpoints run with (that adds compute)",
))


# -- Voxtral -----------------------------------------------------------------------------------------------
def _voxtral_mini_3b() -> VoxtralConfig:
    """Voxtral Mini-3B; a bare config has no audio token id (24 in the checkpoints' processor)."""
    return VoxtralConfig(audio_token_id=24)


register_shapes(BenchShapes("voxtral", {"voxtral-mini-3b": _voxtral_mini_3b}))


# -- Aero-1-Audio (the stand-in of kvprune.models.aero) ------------------------------------------------------
def _aero_1_5b() -> AeroConfig:
    """Qwen2-Audio's Whisper encoder and a linear projector over Qwen2.5-1.5B: Aero-1-Audio's shape."""
    text = dict(
        hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
        intermediate_size=8960, vocab_size=151936, max_position_embeddings=32768,
    )
    return AeroConfig(text_config=text)


register_shapes(BenchShapes(
    "aero", {"aero-1-audio-1.5b": _aero_1_5b},
    note=(
        "Aero-1 is remote code: the stand-in in kvprune.models.aero has its structure (Qwen2-Audio's Whisper "
        "encoder, a linear projector, a Qwen2 LLM of its shape) and inputs, with an untied LM head"
    ),
))


# -- Qwen3-Omni ----------------------------------------------------------------------------------------------
QWEN3_MROPE = dict(rope_type="default", rope_theta=1_000_000.0, mrope_section=[24, 20, 20], mrope_interleaved=True)


def _qwen3_omni_30b_a3b() -> Qwen3OmniMoeThinkerConfig:
    """Qwen3-Omni-30B-A3B's thinker: a 48-layer MoE decoder (128 experts, 8 per token) of width 2048."""
    return Qwen3OmniMoeThinkerConfig(
        audio_config=dict(output_dim=2048),
        vision_config=dict(out_hidden_size=2048),
        text_config=dict(
            hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
            moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, vocab_size=151936,
            max_position_embeddings=65536, rope_parameters=QWEN3_MROPE,
        ),
        audio_end_token_id=151648,
        vision_start_token_id=VISION_START,
    )


register_shapes(BenchShapes(
    "qwen3_omni", {"qwen3-omni-30b-a3b": _qwen3_omni_30b_a3b},
    note="the thinker alone (no talker); 30 B parameters, about 61 GB in bf16",
))


# -- Audio Flamingo 3 ------------------------------------------------------------------------------------------
def _af3_7b() -> AudioFlamingo3Config:
    """nvidia/audio-flamingo-3-hf: the default Whisper-large encoder over a Qwen2.5-7B text model."""
    text = dict(
        model_type="qwen2", hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
        intermediate_size=18944, vocab_size=151936, max_position_embeddings=32768,
        rope_parameters=dict(rope_type="default", rope_theta=1_000_000.0),
    )
    return AudioFlamingo3Config(text_config=text)


register_shapes(BenchShapes(
    "audioflamingo3", {"audio-flamingo-3": _af3_7b}, tiny="tiny-af3",
    note="the longest input its processor takes is 600 s (20 windows of 30 s)",
))

# -- Granite Speech ------------------------------------------------------------------------------------------
#: Granite-3.3's scalings, as in granite-speech-3.3-8b's text config: embeddings times 12, residual
#: branches times 0.22, logits divided by 16; its attention scales logits by 1 / head_dim (attention_multiplier)
GRANITE_MULTIPLIERS = dict(embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=16.0)


def _granite_3_3_8b() -> GraniteSpeechConfig:
    """ibm-granite/granite-speech-3.3-8b: a 16-layer conformer, a 2-layer Q-Former, Granite-3.3-8B."""
    return GraniteSpeechConfig(
        encoder_config=dict(num_layers=16, hidden_dim=1024, num_heads=8, dim_head=128, input_dim=160),
        projector_config=dict(
            model_type="blip_2_qformer", hidden_size=1024, num_hidden_layers=2, num_attention_heads=16,
            intermediate_size=4096, encoder_hidden_size=1024, cross_attention_frequency=1,
        ),
        text_config=dict(
            model_type="granite", hidden_size=4096, num_hidden_layers=40, num_attention_heads=32,
            num_key_value_heads=8, intermediate_size=12800, vocab_size=49160, max_position_embeddings=131072,
            attention_multiplier=1 / 128, **GRANITE_MULTIPLIERS,
        ),
        has_lora_adapter=False,  # the base model is timed (see the note)
    )


register_shapes(BenchShapes(
    "granite_speech", {"granite-speech-3.3-8b": _granite_3_3_8b},
    note="without the speech LoRA adapter the checkpoints switch on for audio (that adds compute)",
))

# -- Gemma-3n: the default config is E4B's shape (35 layers of width 2048, 15 sharing KV) ---------------------
register_shapes(BenchShapes(
    "gemma3n", {"gemma-3n-e4b": Gemma3nConfig},
    note="every clip is 188 tokens (30 s at most), so its longest input is 30 s; built without its timm vision tower",
))
