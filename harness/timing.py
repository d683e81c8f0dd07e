"""The harness's one timing primitive, ``Clock``, and the sweep's use of it: ``timed_generate``
times one ``generate`` call, prefill = time to first token, decode = the rest of the same call (the
bench's ``Meter`` builds its repeated measurements on the same ``Clock``).

The split point is the end of the first forward pass of the module that generates (its prefill),
caught with a forward hook that then removes itself (so a compiled decode step never traces it), and
no second generate or second prefill is ever timed. On CUDA the boundaries are CUDA events and the
device is synchronised once at the end; on CPU, a wall clock.

With ``cache_implementation="static"`` on a GPU, ``generate`` compiles its decode step, and may again
at a new shape (another prompt length, another kept length under a press): such a call's time is
mostly compilation, so ``Timing.compiled`` says whether the call compiled anything.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import torch.nn as nn

from kvprune.compat import kv_cache_bytes, output_cache
from kvprune.generation.clock import Clock
from kvprune.engine.static_cache import is_static


@dataclass
class Timing:
    prefill_s: float
    decode_s: float
    new_tokens: int
    peak_memory_bytes: int | None  # None on CPU, where device memory is not tracked
    kv_cache_bytes: int  # after prefill: the cache's tensors (a static cache's preallocated room included)
    kv_held_bytes: int = 0  # after prefill: the entries the cache holds (without a static cache's room)
    cache: str = "dynamic"  # the kind of cache the call ran on: "dynamic" or "static"
    compiled: bool = False  # whether the call compiled code (torch.compile): its time is not representative

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens after the first (which the prefill produced) per second of decoding."""
        decoded = self.new_tokens - 1
        return decoded / self.decode_s if decoded > 0 and self.decode_s > 0 else None


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


def compiled_graphs() -> int:
    """Graphs torch.compile has made in this process so far (0 if it never ran)."""
    utils = sys.modules.get("torch._dynamo.utils")  # not imported unless something compiled
    return 0 if utils is None else int(utils.counters["stats"]["unique_graphs"])


def timed_generate(
    generator: nn.Module, inputs: dict, marks: dict | None = None, **generate_kwargs
) -> tuple[torch.Tensor, Timing]:
    """Run ``generator.generate(**inputs)`` once and split its time at the end of the prefill.
    ``marks``, when given, receives the clock marks "start", "prefill_end" and "end" (for callers
    that time parts of the call against them)."""
    device = next(generator.parameters()).device
    clock = Clock(device)
    marks = {} if marks is None else marks
    prompt_len = inputs["input_ids"].shape[1]

    def after_prefill(module, args, output):
        marks["prefill_end"] = clock.mark()
        cache = output_cache(output)
        marks.update(kv_bytes=kv_cache_bytes(cache), held=kv_held_bytes(cache, prompt_len), cache=cache_kind(cache))
        # gone before the first decoding step: generate may compile those calls (static cache), and a
        # hook that records CUDA events must not be traced into the compiled graph
        handle.remove()

    handle = generator.register_forward_hook(after_prefill)
    graphs = compiled_graphs()
    clock.sync()
    if clock.cuda:
        torch.cuda.reset_peak_memory_stats(device)
    try:
        marks["start"] = clock.mark()
        output = generator.generate(**inputs, **generate_kwargs)
        marks["end"] = clock.mark()
    finally:
        handle.remove()
    clock.sync()
    new_tokens = output[:, prompt_len:]
    timing = Timing(
        prefill_s=clock.seconds(marks["start"], marks["prefill_end"]),
        decode_s=clock.seconds(marks["prefill_end"], marks["end"]),
        new_tokens=int(new_tokens.shape[1]),
        peak_memory_bytes=int(torch.cuda.max_memory_allocated(device)) if clock.cuda else None,
        kv_cache_bytes=marks["kv_bytes"],
        kv_held_bytes=marks["held"],
        cache=marks["cache"],
        compiled=compiled_graphs() > graphs,
    )
    return new_tokens, timing
