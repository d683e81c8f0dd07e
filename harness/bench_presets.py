"""Models and audio prompts for ``kvprune bench``: real architectures built from their configs with
random weights (nothing is downloaded), and tiny ones of each family for CPU tests.

Timing depends on shapes, not on weight values, so random weights give representative speed as long
as they are finite and not all zero (``check_weights``). Weights are created directly on the device
in the benchmark dtype, so building a 7B model takes seconds on a GPU.

Every family turns seconds of audio into the features its processor would produce and the prompt's
placeholder run, sized so that the model's own encoder yields exactly that many audio embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import transformers
from transformers import (
    Phi4MultimodalConfig,
    PreTrainedConfig,
    Qwen2_5OmniThinkerConfig,
    Qwen2AudioConfig,
    VoxtralConfig,
)

from kvprune.models import resolve_family

FRAMES_PER_SECOND = 100  # log-mel hop of 10 ms, in every family here
TEXT_BEFORE, TEXT_AFTER = 24, 48  # prompt text around the audio: a system prompt, then the question


def whisper_tokens(frames: int) -> int:
    """Embeddings a Whisper-style encoder gives for ``frames`` mel frames: conv stride 2, then pool 2."""
    after_conv = (frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


def _frames(seconds: float) -> int:
    return max(1, round(seconds * FRAMES_PER_SECOND))


def _module(model: nn.Module, paths: tuple[str, ...]) -> nn.Module:
    """The first of ``paths`` that exists (transformers versions nest some modules differently)."""
    for path in paths:
        module = model
        for part in path.split("."):
            module = getattr(module, part, None)
        if module is not None:
            return module
    raise AttributeError(f"{type(model).__name__} has none of {', '.join(paths)}")


@dataclass(frozen=True)
class AudioFormat:
    """How one family's processor turns seconds of audio into model inputs."""

    #: dotted paths of the module whose call starts the audio encoder and of the one whose call ends
    #: the projection into the LLM (alternatives for different transformers versions)
    encoder_start: tuple[str, ...]
    encoder_end: tuple[str, ...]

    def tokens(self, config, seconds: float) -> int:
        raise NotImplementedError

    def features(self, config, seconds: float, generator: torch.Generator) -> dict:
        raise NotImplementedError

    def placeholders(self, config, audio_token_id: int, n_tokens: int) -> list[int]:
        return [audio_token_id] * n_tokens

    def encoder_modules(self, model: nn.Module) -> tuple[nn.Module, nn.Module]:
        return _module(model, self.encoder_start), _module(model, self.encoder_end)


@dataclass(frozen=True)
class OmniAudio(AudioFormat):
    """Qwen2.5-Omni: one clip of 100 frames/s, 4 frames per token (25 tokens/s), framed by audio
    start/end tokens. A frame count that is an exact multiple of the encoder's 2*n_window window
    trips its chunking (seen on 5.17), so such counts lose one frame."""

    def frames(self, config, seconds: float) -> int:
        frames = _frames(seconds)
        return frames - 1 if frames % (2 * config.audio_config.n_window) == 0 else frames

    def tokens(self, config, seconds):
        return whisper_tokens(self.frames(config, seconds))

    def features(self, config, seconds, generator):
        frames = self.frames(config, seconds)
        mels = torch.randn(1, config.audio_config.num_mel_bins, frames, generator=generator)
        return dict(input_features=mels, feature_attention_mask=torch.ones(1, frames, dtype=torch.long))

    def placeholders(self, config, audio_token_id, n_tokens):
        return [
            config.audio_start_token_id,
            *super().placeholders(config, audio_token_id, n_tokens),
            config.audio_end_token_id,
        ]


@dataclass(frozen=True)
class WhisperChunkAudio(AudioFormat):
    """Qwen2-Audio and Aero-1: 30 s chunks of 3000 frames (2*max_source_positions) stacked on the
    batch axis, the last one masked to its real length; 750 tokens per full chunk (25 tokens/s),
    all in one placeholder run."""

    def chunk_lengths(self, config, seconds: float) -> list[int]:
        chunk = 2 * config.audio_config.max_source_positions
        frames = _frames(seconds)
        full, rest = divmod(frames, chunk)
        return [chunk] * full + ([rest] if rest else [])

    def tokens(self, config, seconds):
        return sum(whisper_tokens(n) for n in self.chunk_lengths(config, seconds))

    def features(self, config, seconds, generator):
        lengths = self.chunk_lengths(config, seconds)
        chunk = 2 * config.audio_config.max_source_positions
        mask = (torch.arange(chunk)[None] < torch.tensor(lengths)[:, None]).long()
        mels = torch.randn(len(lengths), config.audio_config.num_mel_bins, chunk, generator=generator)
        return dict(input_features=mels, feature_attention_mask=mask)


@dataclass(frozen=True)
class VoxtralAudio(AudioFormat):
    """Voxtral: audio padded to whole 30 s chunks of 3000 frames stacked on the batch axis; the
    projector merges 4 encoder frames into one token, so 375 tokens per chunk (12.5 tokens/s)."""

    def chunks(self, config, seconds: float) -> int:
        return math.ceil(_frames(seconds) / (2 * config.audio_config.max_source_positions))

    def tokens(self, config, seconds):
        audio = config.audio_config
        per_chunk = audio.max_source_positions // (audio.intermediate_size // audio.hidden_size)
        return self.chunks(config, seconds) * per_chunk

    def features(self, config, seconds, generator):
        audio = config.audio_config
        shape = (self.chunks(config, seconds), audio.num_mel_bins, 2 * audio.max_source_positions)
        return dict(input_features=torch.randn(*shape, generator=generator))


@dataclass(frozen=True)
class Phi4Audio(AudioFormat):
    """Phi-4-multimodal: 100 frames/s reduced 8x by the conformer (12.5 tokens/s), with the token
    count passed as ``audio_embed_sizes``."""

    def tokens(self, config, seconds):
        return max(1, round(_frames(seconds) / config.audio_config.time_reduction))

    def features(self, config, seconds, generator):
        n = self.tokens(config, seconds)
        frames = n * config.audio_config.time_reduction
        mels = torch.randn(1, frames, config.audio_config.input_size, generator=generator)
        return dict(audio_input_features=mels, audio_embed_sizes=torch.tensor([n]))


OMNI_AUDIO = OmniAudio(
    encoder_start=("model.audio_tower", "audio_tower"), encoder_end=("model.audio_tower", "audio_tower")
)
WHISPER_CHUNK_AUDIO = WhisperChunkAudio(
    encoder_start=("model.audio_tower",), encoder_end=("model.multi_modal_projector",)
)
VOXTRAL_AUDIO = VoxtralAudio(encoder_start=("model.audio_tower",), encoder_end=("model.multi_modal_projector",))
PHI4_AUDIO = Phi4Audio(
    encoder_start=("model.embed_tokens_extend.audio_embed",), encoder_end=("model.embed_tokens_extend.audio_embed",)
)


@dataclass
class Prompt:
    """One benchmark request: the prefill inputs (on the device) and the forced decode tokens."""

    inputs: dict
    decode_ids: list[torch.Tensor]  # each (1, 1)
    audio_tokens: int

    @property
    def seq_len(self) -> int:
        return self.inputs["input_ids"].shape[1]


@dataclass(frozen=True)
class Preset:
    """A model to benchmark: a transformers class, the config of its shape, its audio format."""

    name: str
    model_class: str  # a transformers class, named so that only the benchmarked family's code is imported
    config: Callable[[], PreTrainedConfig]
    audio: AudioFormat
    text_ids: tuple[int, int] = (1000, 30000)  # ordinary text tokens to draw from, clear of special ids
    note: str = ""

    def build(self, device: torch.device, dtype: torch.dtype, attn_implementation: str, seed: int = 0) -> nn.Module:
        """The model with random weights, created on ``device`` in ``dtype`` (no CPU copy, no download)."""
        torch.manual_seed(seed)
        with torch.device(device):
            model_class = getattr(transformers, self.model_class)
            model = model_class._from_config(self.config(), dtype=dtype, attn_implementation=attn_implementation)
        return model.to(device).eval()  # moves nothing unless a module created a tensor on another device

    def prompt(self, model: nn.Module, seconds: float, decode_tokens: int, seed: int = 0) -> Prompt:
        """Text, one clip of ``seconds`` of random audio features, text; all on the model's device."""
        config = model.config
        generator = torch.Generator().manual_seed(seed)
        n_audio = self.audio.tokens(config, seconds)
        audio_token_id = resolve_family(model).audio_token_id(model)
        text = torch.randint(*self.text_ids, (TEXT_BEFORE + TEXT_AFTER,), generator=generator).tolist()
        ids = text[:TEXT_BEFORE] + self.audio.placeholders(config, audio_token_id, n_audio) + text[TEXT_BEFORE:]
        parameter = next(model.parameters())
        inputs = dict(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        inputs.update(self.audio.features(config, seconds, generator))
        inputs = {
            name: value.to(parameter.device, parameter.dtype if value.is_floating_point() else None)
            for name, value in inputs.items()
        }
        decode = torch.arange(self.text_ids[0], self.text_ids[0] + decode_tokens, device=parameter.device)
        return Prompt(inputs=inputs, decode_ids=[t.view(1, 1) for t in decode], audio_tokens=n_audio)


def check_weights(model: nn.Module, audio: AudioFormat) -> None:
    """Refuse random weights that would make timings unrepresentative: non-finite values, or an
    all-zero weight matrix, in the parts the bench times (the LLM's decoder layers and the audio encoder)."""
    encoder, projector = audio.encoder_modules(model)
    parts = {"decoder": resolve_family(model).layers(model), "encoder": encoder, "projector": projector}
    for part, module in parts.items():
        for name, parameter in module.named_parameters():
            if not bool(torch.isfinite(parameter).all()):
                raise ValueError(
                    f"random weights of the {part}'s {name} are not finite; timings would not be representative"
                )
            if name.endswith("weight") and parameter.dim() >= 2 and not bool(parameter.any()):
                raise ValueError(
                    f"random weights of the {part}'s {name} are all zero; timings would not be representative"
                )


# -- real shapes (FACTS §2) --------------------------------------------------------------------------
MROPE = dict(rope_type="default", rope_theta=1_000_000.0, mrope_section=[16, 24, 24])  # as the checkpoints
OMNI_VISION_START = 151652  # a bare config lacks it, but position ids are computed from it even without vision


def _omni(text: dict, width: int) -> Qwen2_5OmniThinkerConfig:
    """The thinker of the checkpoints: audio and vision encoders project to the text width; the
    vision tower is built (as loading a checkpoint would) at its real width 1280, not the config
    default 3584, so that memory numbers include the right weights."""
    return Qwen2_5OmniThinkerConfig(
        text_config=text,
        audio_config=dict(output_dim=width),
        vision_config=dict(hidden_size=1280, out_hidden_size=width),
        vision_start_token_id=OMNI_VISION_START,
    )


def _omni_7b() -> Qwen2_5OmniThinkerConfig:
    return _omni(text=dict(rope_parameters=MROPE), width=3584)


def _omni_3b() -> Qwen2_5OmniThinkerConfig:
    """Qwen2.5-3B text model; the audio encoder is the 7B's, projecting to 2048."""
    text = dict(
        hidden_size=2048,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        intermediate_size=11008,
        vocab_size=151936,
        rope_parameters=MROPE,
    )
    return _omni(text=text, width=2048)


def _voxtral() -> VoxtralConfig:
    """Voxtral Mini-3B; a bare config has no audio token id (24 in the checkpoints' processor)."""
    return VoxtralConfig(audio_token_id=24)


def _aero() -> Qwen2AudioConfig:
    """Qwen2-Audio's Whisper encoder and linear projector over Qwen2.5-1.5B: Aero-1-Audio's structure."""
    text = dict(
        model_type="qwen2",
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        vocab_size=151936,
        max_position_embeddings=32768,
    )
    return Qwen2AudioConfig(text_config=text)


# -- tiny shapes for CPU tests -----------------------------------------------------------------------
TINY_AUDIO, TINY_AUDIO_START, TINY_AUDIO_END = 100, 101, 102
TINY_TEXT_IDS = (10, 90)
TINY_MELS = 16
TINY_TEXT = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
TINY_WHISPER = dict(num_mel_bins=TINY_MELS, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32, d_model=32)


def _tiny_omni() -> Qwen2_5OmniThinkerConfig:
    return Qwen2_5OmniThinkerConfig(
        audio_config=dict(**TINY_WHISPER, output_dim=TINY_TEXT["hidden_size"]),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=64),
        text_config=dict(
            **TINY_TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])
        ),
        audio_token_index=TINY_AUDIO,
        audio_start_token_id=TINY_AUDIO_START,
        audio_end_token_id=TINY_AUDIO_END,
        image_token_index=103,
        video_token_index=104,
        vision_start_token_id=105,
    )


def _tiny_phi4() -> Phi4MultimodalConfig:
    return Phi4MultimodalConfig(
        **TINY_TEXT,
        audio_config=dict(
            hidden_size=32,
            intermediate_size=32,
            num_blocks=1,
            num_attention_heads=2,
            ext_pw_out_channel=32,
            depthwise_separable_out_channel=32,
            nemo_conv_channels=32,
            input_size=TINY_MELS,
            audio_token_id=TINY_AUDIO,
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_token_id=103
        ),
        original_max_position_embeddings=4096,
    )


def _tiny_voxtral() -> VoxtralConfig:
    return VoxtralConfig(
        audio_config=dict(
            num_mel_bins=TINY_MELS,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            hidden_size=16,
        ),
        text_config=dict(**TINY_TEXT, head_dim=16),
        audio_token_id=TINY_AUDIO,
    )


def _tiny_aero() -> Qwen2AudioConfig:
    return Qwen2AudioConfig(
        audio_config=TINY_WHISPER, text_config=dict(model_type="qwen2", **TINY_TEXT), audio_token_index=TINY_AUDIO
    )


_AERO_NOTE = (
    "stand-in: Qwen2AudioForConditionalGeneration with Aero-1's text shape (Aero-1 is remote code; vLLM serves "
    "it as Qwen2-Audio, whose Whisper encoder and linear projector it shares)"
)
_PHI4_NOTE = "without the speech LoRA adapter real checkpoints run with (that adds compute)"

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("qwen2.5-omni-7b", "Qwen2_5OmniThinkerForConditionalGeneration", _omni_7b, OMNI_AUDIO),
        Preset("qwen2.5-omni-3b", "Qwen2_5OmniThinkerForConditionalGeneration", _omni_3b, OMNI_AUDIO),
        Preset("phi4-mm", "Phi4MultimodalForCausalLM", Phi4MultimodalConfig, PHI4_AUDIO, note=_PHI4_NOTE),
        Preset("voxtral-mini-3b", "VoxtralForConditionalGeneration", _voxtral, VOXTRAL_AUDIO),
        Preset("aero-1-audio-1.5b", "Qwen2AudioForConditionalGeneration", _aero, WHISPER_CHUNK_AUDIO, note=_AERO_NOTE),
        Preset("tiny-omni", "Qwen2_5OmniThinkerForConditionalGeneration", _tiny_omni, OMNI_AUDIO, TINY_TEXT_IDS),
        Preset("tiny-phi4", "Phi4MultimodalForCausalLM", _tiny_phi4, PHI4_AUDIO, TINY_TEXT_IDS),
        Preset("tiny-voxtral", "VoxtralForConditionalGeneration", _tiny_voxtral, VOXTRAL_AUDIO, TINY_TEXT_IDS),
        Preset("tiny-aero", "Qwen2AudioForConditionalGeneration", _tiny_aero, WHISPER_CHUNK_AUDIO, TINY_TEXT_IDS),
    )
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown bench preset {name!r}; available: {', '.join(PRESETS)}") from None
