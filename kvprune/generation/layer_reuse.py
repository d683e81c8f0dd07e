"""Sharing the embedding and decoder layers < K between token presses at the same K, exactly.

A token-dropping press at layer K leaves layers 0..K-1 untouched: their inputs, outputs and cache
entries are the unpruned model's. A sweep runs every sample under many presses at the same K (by
default every token press at K = 2, at nine ratios each), so it computes the same first layers many
times. ``share_layers_below(model, press, reuse)`` remembers them across prefills: while the block is
open, a prefill of inputs equal to a remembered one's (every tensor argument of the forward equal,
element for element, shapes and dtypes too) under a token press at the same K replays layers < K
instead of running them: each writes its remembered keys and values into the cache (the very tensors
it wrote before) and the layers return the remembered output of layer K-1. What the press reads of
layer K-1 is replayed too: its output (the press's hook sees it), its keys (the cache's), and the last
query's attention row where a press records it (FastV); a prefill that needs a record the remembered
one lacks runs the layers and is remembered instead. Nothing is approximated: every later layer
computes on the tensors it would have computed on.

Only prefills through the engine (``prefill.forward_prefill``) share, and only while they run: the
layers are stock during decoding, which may be compiled. A press with a cache press acting below K
(which rewrites those layers' caches) shares nothing. Remembered prefills (cache entries and the
output of layer K-1, on the device) are kept up to ``max_bytes``; beyond it a new one is not kept
(a sweep cycles through a batch's samples run by run: keeping the first ones serves them all runs
long). ``LayerReuse.hits``, ``misses`` and ``layer_forwards`` (layers < K actually run) count what
happened.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from ..compat import find_cache
from ..models import resolve_family
from . import prefill as prefill_module
from .encoder_reuse import _bytes, _equal, _signature

DEFAULT_MAX_BYTES = 4 << 30


@dataclass
class Remembered:
    """One prefill's layers < K: its forward's tensor arguments, each layer's cache entries, layer K-1's
    output and the attention row recorded there (None: none was)."""

    arguments: dict
    entries: list[tuple[torch.Tensor, torch.Tensor]]
    output: object
    attention_row: torch.Tensor | None
    scaling: float | None


@dataclass
class LayerReuse:
    """What ``share_layers_below`` remembers and how often it could replay it."""

    max_bytes: int = DEFAULT_MAX_BYTES
    hits: int = 0
    misses: int = 0
    layer_forwards: int = 0  # forwards of layers < K that ran (not replayed)
    _kept: dict = field(default_factory=dict, repr=False)  # (K, signature) -> [Remembered]

    @property
    def held_bytes(self) -> int:
        return sum(_bytes(r.entries) + _bytes(r.output) for kept in self._kept.values() for r in kept)

    def clear(self) -> None:
        self._kept.clear()

    def equal(self, k: int, key, arguments: dict) -> list[Remembered]:
        """The remembered prefills at ``k`` whose arguments equal ``arguments`` (a read of the device: made
        before the prefill queues anything, so that it waits for no work of its own)."""
        return [remembered for remembered in self._kept.get((k, key), []) if _equal(remembered.arguments, arguments)]

    def keep(self, k: int, key, remembered: Remembered, replaces: list[Remembered]) -> None:
        """Remember ``remembered`` in place of ``replaces`` (those of equal arguments), within ``max_bytes``."""
        kept = [r for r in self._kept.get((k, key), []) if not any(r is old for old in replaces)]
        if self.held_bytes + _bytes(remembered.entries) + _bytes(remembered.output) <= self.max_bytes:
            self._kept[(k, key)] = [*kept, remembered]


@contextmanager
def share_layers_below(model: nn.Module, press, reuse: LayerReuse):
    """Inside the block, prefills of ``model`` under ``press`` (a token press, or a composition whose cache
    presses act at K or later) share layers < K through ``reuse`` (see the module docstring)."""
    k = shared_layers(press)
    family = resolve_family(model)
    if k is None:
        yield reuse
        return
    entry = family.entry(model)
    prefill_module.AROUND_PREFILL[entry] = lambda call: _sharing(family.layers(model)[:k], call.arguments, reuse)
    try:
        yield reuse
    finally:
        prefill_module.AROUND_PREFILL.pop(entry, None)


def shared_layers(press) -> int | None:
    """K, the layers a press leaves as the unpruned model computes them (None: it shares none)."""
    if press is None:
        return None
    parts = press.parts() if hasattr(press, "parts") else [press]
    tokens = [part for part in parts if part.kind == "token"]
    if len(tokens) != 1 or tokens[0].layer < 1 or any(part.layer < tokens[0].layer for part in parts if part.kind == "cache"):
        return None
    return tokens[0].layer


@contextmanager
def _sharing(layers: nn.ModuleList, arguments: dict, reuse: LayerReuse):
    """For one prefill: layers < K replay a remembered prefill of equal arguments, or run and are remembered."""
    arguments = {name: value for name, value in arguments.items() if isinstance(value, (torch.Tensor, list, tuple, dict))}
    key = _signature((), arguments)
    k = len(layers)
    recorder = getattr(layers[-1].self_attn, "_kvprune_recorder", None) if hasattr(layers[-1], "self_attn") else None
    equal = reuse.equal(k, key, arguments)
    state: dict = {}

    def wrapped(j: int, layer: nn.Module, forward):
        def run(*args, **kwargs):
            if j == 0:  # the press's set-up (layer 0's pre-hook) has armed what it records: decide now
                wants_row = recorder is not None and recorder.armed and recorder.want_attention
                state["replay"] = next((r for r in equal if r.attention_row is not None or not wants_row), None)
                state["entries"] = []
                reuse.hits += state["replay"] is not None
                reuse.misses += state["replay"] is None
            cache, index = find_cache(kwargs), getattr(getattr(layer, "self_attn", None), "layer_idx", j)
            replay = state["replay"]
            if replay is not None:
                cache.update(*replay.entries[j], index)
                if j == k - 1 and recorder is not None and recorder.armed:
                    recorder.keys, recorder.attention_row = cache.layers[index].keys, replay.attention_row
                    recorder.scaling, recorder.armed = replay.scaling, False
                return replay.output
            output = forward(*args, **kwargs)
            reuse.layer_forwards += 1
            state["entries"].append((cache.layers[index].keys, cache.layers[index].values))
            if j == k - 1:
                row = recorder.attention_row if recorder is not None else None
                scaling = recorder.scaling if recorder is not None else None
                reuse.keep(k, key, Remembered(arguments, state["entries"], output, row, scaling), replaces=equal)
            return output

        return run

    originals = [layer.__dict__.get("forward") for layer in layers]
    for j, layer in enumerate(layers):
        layer.forward = wrapped(j, layer, layer.forward)
    try:
        yield
    finally:
        for layer, original in zip(layers, originals):
            if original is None:
                del layer.forward
            else:
                layer.forward = original
