"""Models and audio prompts for ``kvprune bench``: real architectures built from their configs with
random weights (nothing is downloaded), and tiny ones of each family for CPU tests.

The presets come from ``shapes.py`` (each family's real shapes, its tiny preset's name, a note) and
the model families (``kvprune.models``: the tiny config, where the audio encoder is, and how seconds
of audio become features and placeholders, sized so that the model's own encoder yields exactly that
many audio embeddings). This module only turns those into prompts and checked random-weight models.

Timing depends on shapes, not on weight values, so random weights give representative speed as long
as they are finite and not all zero (``check_weights``). Weights are created directly on the device
in the benchmark dtype, so building a 7B model takes seconds on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
from transformers import PreTrainedConfig

from kvprune.models import ModelFamily, list_families, resolve_family, tiny
from kvprune.registry import Registry

from .shapes import shapes_of

TEXT_BEFORE, TEXT_AFTER = 24, 48  # prompt text around the audio: a system prompt, then the question


@dataclass
class Prompt:
    """One benchmark request: the prefill inputs (on the device) and the forced decode tokens; a batch
    holds the same prompt in every row (equal lengths: no padding)."""

    inputs: dict
    decode_ids: list[torch.Tensor]  # each (batch, 1)
    audio_tokens: int  # per row

    @property
    def seq_len(self) -> int:
        return self.inputs["input_ids"].shape[1]

    @property
    def batch(self) -> int:
        return self.inputs["input_ids"].shape[0]

    @property
    def input_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.inputs.values())


@dataclass(frozen=True)
class Preset:
    """A model to benchmark: a family and the config of one of its shapes."""

    name: str
    family: ModelFamily
    config: Callable[[], PreTrainedConfig]
    text_ids: tuple[int, int] = (1000, 30000)  # ordinary text tokens to draw from, clear of special ids
    note: str = ""  # what a reader of its tables must know (the family's note, ``shapes.py``)

    def build(self, device: torch.device, dtype: torch.dtype, attn_implementation: str, seed: int = 0) -> nn.Module:
        """The model with random weights, created on ``device`` in ``dtype`` (no CPU copy, no download)."""
        torch.manual_seed(seed)
        with torch.device(device):
            model = self.family.build(self.config(), dtype=dtype, attn_implementation=attn_implementation)
        return model.to(device).eval()  # moves nothing unless a module created a tensor on another device

    def prompt(self, model: nn.Module, seconds: float, decode_tokens: int, seed: int = 0, batch: int = 1) -> Prompt:
        """Text, one clip of ``seconds`` of random audio features, text, in each of ``batch`` rows (the
        same prompt in every row); all on the model's device."""
        config, audio = model.config, self.family.prompting.audio_format
        generator = torch.Generator().manual_seed(seed)
        frames = audio.frames(config, seconds)
        n_audio = audio.tokens(config, frames)
        placeholders = audio.placeholders(config, self.family.audio_token_id(model), n_audio)
        text = torch.randint(*self.text_ids, (TEXT_BEFORE + TEXT_AFTER,), generator=generator).tolist()
        ids = torch.tensor([text[:TEXT_BEFORE] + placeholders + text[TEXT_BEFORE:]]).expand(batch, -1).contiguous()
        inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
        inputs.update(audio.features(config, [frames] * batch, generator))
        parameter = next(model.parameters())
        inputs = {
            name: value.to(parameter.device, parameter.dtype if value.is_floating_point() else None)
            for name, value in inputs.items()
        }
        decode = torch.arange(self.text_ids[0], self.text_ids[0] + decode_tokens, device=parameter.device)
        return Prompt(inputs=inputs, decode_ids=[t.view(1, 1).repeat(batch, 1) for t in decode], audio_tokens=n_audio)


def check_weights(model: nn.Module) -> None:
    """Refuse random weights that would make timings unrepresentative: non-finite values, or an
    all-zero weight matrix, in the parts the bench times (the LLM's decoder layers and the audio encoder)."""
    family = resolve_family(model)
    encoder, projector = family.audio_encoder(model)
    parts = {"decoder": family.layers(model), "encoder": encoder, "projector": projector}
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


PRESETS: Registry[Preset] = Registry("bench preset")


def _register_family_presets() -> None:
    """Every family's real shapes, then every family's tiny config (with the tiny text ids)."""
    families = list_families()
    for family in families:
        shapes = shapes_of(family)
        for name, config in shapes.real.items():
            PRESETS.register(name, Preset(name, family, config, note=shapes.note))
    for family in families:
        name, note = shapes_of(family).tiny_preset, shapes_of(family).note
        PRESETS.register(name, Preset(name, family, family.tiny_config, tiny.TEXT_IDS, note))


_register_family_presets()
