"""Reusing a prompt's audio encoder output across generations of the same inputs.

A sweep generates every sample under many methods and ratios; the audio encoder's output is the same
for all of them (pruning happens in the decoder), and it is a large part of the prefill (at 5 minutes
of audio, 41 of 92 ms on the Qwen2.5-Omni-7B shape with the fast encoder). ``reuse_audio_encoder``
memoises the family's audio encoder module while the block is open: a call whose inputs equal a
remembered call's (every tensor argument equal, element for element, shapes and dtypes too) returns
the remembered output object instead of running again. Reuse is exact by construction: nothing is
approximated, the model computes on the very tensor it computed before.

Remembered calls (inputs and outputs) stay on the device, at most ``max_bytes`` of them; the least
recently used go first. ``EncoderReuse.hits`` and ``misses`` count what happened.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from ..models import resolve_family

DEFAULT_MAX_BYTES = 2 << 30


@dataclass
class EncoderReuse:
    """What a ``reuse_audio_encoder`` block remembers and how often it could reuse it."""

    max_bytes: int = DEFAULT_MAX_BYTES
    hits: int = 0
    misses: int = 0
    _calls: OrderedDict = field(default_factory=OrderedDict, repr=False)

    @property
    def held_bytes(self) -> int:
        return sum(size for _, _, size in self._calls.values())

    def clear(self) -> None:
        self._calls.clear()

    def call(self, forward, args: tuple, kwargs: dict):
        key = _signature(args, kwargs)
        for stored_key, (stored_inputs, output, _) in list(self._calls.items()):
            if stored_key[0] == key and _equal(stored_inputs, (args, kwargs)):
                self._calls.move_to_end(stored_key)
                self.hits += 1
                return output
        self.misses += 1
        output = forward(*args, **kwargs)
        inputs = (args, kwargs)
        size = _bytes(inputs) + _bytes(output)
        self._calls[(key, self.misses)] = (inputs, output, size)
        while len(self._calls) > 1 and self.held_bytes > self.max_bytes:
            self._calls.popitem(last=False)
        return output


@contextmanager
def reuse_audio_encoder(model: nn.Module, reuse: EncoderReuse | None = None):
    """Inside the block, ``model``'s audio encoder returns remembered outputs for inputs it has seen
    (see the module docstring); yields the ``EncoderReuse`` (a given one keeps what it remembered)."""
    reuse = reuse if reuse is not None else EncoderReuse()
    encoder, _ = resolve_family(model).audio_encoder(model)
    previous = encoder.__dict__.get("forward")
    current = encoder.forward

    def forward(*args, **kwargs):
        return reuse.call(current, args, kwargs)

    encoder.forward = forward
    try:
        yield reuse
    finally:
        if previous is None:
            del encoder.forward
        else:
            encoder.forward = previous


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif hasattr(value, "to_tuple"):  # a transformers ModelOutput
        yield from _tensors(value.to_tuple())


def _signature(args, kwargs) -> tuple:
    """What two calls must share before their tensors are compared: structure, shapes, dtypes, and
    every non-tensor argument."""
    def describe(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape), value.dtype, value.device)
        if isinstance(value, dict):
            return ("dict", tuple((k, describe(v)) for k, v in sorted(value.items())))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(describe(v) for v in value))
        return ("value", repr(value))

    return describe((args, kwargs))


def _equal(stored, current) -> bool:
    return all(torch.equal(a, b) for a, b in zip(_tensors(stored), _tensors(current)))


def _bytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(value))
