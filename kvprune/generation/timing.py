"""kvprune's one timing vocabulary: how a generation call is clocked and what its record says, whichever
path generated (the engine's ``Generator``, or stock ``generate`` through ``stock.stock_generate``) and
whoever reads it (the sweep, the bench, the estimate).

* ``Clock``: marks on the device timeline (CUDA events) or the host clock, for work the device runs
  asynchronously;
* ``Timing``: one call's seconds, split at the end of its prefill (time to first token), with what its
  cache held after the prefill and whether the call compiled;
* ``kv_cache_bytes``, ``kv_held_bytes``, ``cache_kind``: the cache after a prefill, as ``Timing`` counts it;
* ``compile_counters``: what torch.compile has made in this process (a call that made something is timed
  as compilation, not as the work).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import torch

from ..engine.static_cache import is_static

#: ``Timing.cache`` of a call that decoded on kvprune's engine (its static decode states)
ENGINE_CACHE = "engine"


class Clock:
    """Marks on the device timeline (CUDA events, on the device's current stream) or the host clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return time.perf_counter()

    def seconds(self, start, end) -> float:
        """Seconds between two marks (waiting for the device to reach ``end``)."""
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        return end - start

    def sync(self) -> None:
        """Wait for the device's queued work (a no-op on CPU), so that marks can be read."""
        if self.cuda:
            torch.cuda.synchronize(self.device)


@dataclass
class Timing:
    """One generation call: its prefill (to the first token) and the decoding after it, and its cache."""

    prefill_s: float
    decode_s: float
    new_tokens: int  # generated per row (the longest row; ended rows are padded)
    peak_memory_bytes: int | None = None  # device memory at the call's peak (None: on a CPU, or not measured)
    kv_cache_bytes: int = 0  # after the prefill: the cache's tensors (a static cache's or decode state's room included)
    kv_held_bytes: int = 0  # after the prefill: the keys and values the prompts left in every layer's cache
    cache: str = "dynamic"  # what the call decoded on: "engine" (kvprune's), "static" or "dynamic" (stock generate)
    compiled: bool = False  # the call compiled code or captured a CUDA graph: its time is not representative

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens after the first (which the prefill produced) per second of decoding, per row."""
        decoded = self.new_tokens - 1
        return decoded / self.decode_s if decoded > 0 and self.decode_s > 0 else None

    @classmethod
    def of_calls(cls, timings: list[Timing]) -> Timing:
        """Calls made one after another as one (a batch generated sample by sample): their seconds and bytes
        added up, the most tokens and the highest peak of any, compiled if any compiled."""
        if len(timings) == 1:
            return timings[0]
        peaks = [t.peak_memory_bytes for t in timings if t.peak_memory_bytes is not None]
        return cls(
            prefill_s=sum(t.prefill_s for t in timings), decode_s=sum(t.decode_s for t in timings),
            new_tokens=max(t.new_tokens for t in timings), peak_memory_bytes=max(peaks) if peaks else None,
            kv_cache_bytes=sum(t.kv_cache_bytes for t in timings), kv_held_bytes=sum(t.kv_held_bytes for t in timings),
            cache=timings[0].cache, compiled=any(t.compiled for t in timings),
        )


def kv_cache_bytes(cache) -> int:
    """Bytes held by the keys and values of every layer of a transformers cache (0 for none)."""
    if cache is None:
        return 0
    total = 0
    for layer in cache.layers:
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def kv_held_bytes(cache, prompt_len: int) -> int:
    """Bytes of the entries a cache holds right after a prefill of ``prompt_len`` positions. A static
    cache preallocates room for the new tokens after the prompt, the same in every layer (layer 0
    holds the whole prompt); that room is left out, so that static and dynamic caches compare."""
    layers = [] if cache is None else [layer for layer in cache.layers if isinstance(getattr(layer, "keys", None), torch.Tensor)]
    if not layers:
        return 0
    room = layers[0].keys.shape[-2] - prompt_len
    total = 0
    for layer in layers:
        slots = layer.keys.shape[-2]
        for tensor in (layer.keys, layer.values):
            total += tensor.numel() * tensor.element_size() * (slots - room) // slots
    return total


def cache_kind(cache) -> str:
    return "static" if is_static(cache) else "dynamic"


def compile_counters() -> tuple[int, int]:
    """(graphs torch.compile has made, recompilations) in this process so far."""
    utils = sys.modules.get("torch._dynamo.utils")  # not imported unless something compiled
    if utils is None:
        return 0, 0
    stats = utils.counters["stats"]
    return int(stats["unique_graphs"]), int(sum(utils.counters["recompiles"].values()))
