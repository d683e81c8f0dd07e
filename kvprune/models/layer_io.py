"""How a family's decoder layers take and pass on the token sequence, where they differ from the usual.

The usual decoder layer (every family but Gemma-3n) receives hidden states (B, S, D) first and the
per-token arguments ``position_embeddings``, ``position_ids`` and ``attention_mask``, returns the
next hidden states, and attends to the keys and values it computed itself. The engine gathers
those to the kept tokens. A family whose layers also take other per-token inputs, carry several
residual streams or reuse another layer's keys says so with a ``LayerIO`` of its own.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn as nn


@dataclass(frozen=True)
class LayerIO:
    """The usual decoder layer."""

    #: sequence axis of the hidden states a decoder layer receives and returns
    hidden_axis: int = 1
    #: names of further per-token arguments (sequence axis 1) of a decoder layer, gathered like the mask
    token_args: tuple[str, ...] = ()

    def stream(self, output, config) -> torch.Tensor:
        """The residual stream (B, S, D) in a decoder layer's output, before the final norm."""
        return output[0] if isinstance(output, tuple) else output

    def kv_sources(self, config) -> dict[int, int]:
        """Decoder layer -> the earlier layer whose cached keys and values it attends to instead of its own."""
        return {}


@lru_cache(maxsize=None)
def _parameter_names(forward_type: type) -> tuple[str, ...]:
    return tuple(inspect.signature(forward_type.forward).parameters)[1:]  # without self


def by_name(layer: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A decoder layer's call arguments with all but the hidden states by name (Gemma-3n passes its
    rotary embeddings and per-layer inputs positionally), so hooks find each argument by its name."""
    if len(args) <= 1:
        return args, kwargs
    names = _parameter_names(type(layer))
    return args[:1], {**dict(zip(names[1:], args[1:])), **kwargs}
