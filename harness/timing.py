"""The harness's one timing primitive, ``Clock``, and the sweep's use of it: ``timed_generate``
times one ``generate`` call, prefill = time to first token, decode = the rest of the same call (the
bench's ``Meter`` builds its repeated measurements on the same ``Clock``).

The split point is the end of the first forward pass of the module that generates (its prefill),
caught with a forward hook, so no second generate or second prefill is ever timed. On CUDA the
boundaries are CUDA events and the device is synchronised once at the end; on CPU, a wall clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn as nn

from kvprune.compat import output_cache


@dataclass
class Timing:
    prefill_s: float
    decode_s: float
    new_tokens: int
    peak_memory_bytes: int | None  # None on CPU, where device memory is not tracked
    kv_cache_bytes: int  # after prefill

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens after the first (which the prefill produced) per second of decoding."""
        decoded = self.new_tokens - 1
        return decoded / self.decode_s if decoded > 0 and self.decode_s > 0 else None


def kv_cache_bytes(cache) -> int:
    """Bytes held by the keys and values of every layer of a transformers cache."""
    if cache is None:
        return 0
    total = 0
    for layer in cache.layers:
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


class Clock:
    """Marks on the device timeline (CUDA events) or the host clock."""

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
        return start.elapsed_time(end) / 1000.0 if self.cuda else end - start

    def sync(self) -> None:
        """Wait for the device's queued work (a no-op on CPU), so that marks can be read."""
        if self.cuda:
            torch.cuda.synchronize(self.device)


def timed_generate(generator: nn.Module, inputs: dict, **generate_kwargs) -> tuple[torch.Tensor, Timing]:
    """Run ``generator.generate(**inputs)`` once and split its time at the end of the prefill."""
    device = next(generator.parameters()).device
    clock = Clock(device)
    marks: dict = {}

    def after_prefill(module, args, output):
        marks["prefill_end"] = clock.mark()
        marks["kv_bytes"] = kv_cache_bytes(output_cache(output))
        # gone before the first decoding step: generate may compile those calls (static cache), and a
        # hook that records CUDA events must not be traced into the compiled graph
        handle.remove()

    handle = generator.register_forward_hook(after_prefill)
    clock.sync()
    if clock.cuda:
        torch.cuda.reset_peak_memory_stats(device)
    try:
        start = clock.mark()
        output = generator.generate(**inputs, **generate_kwargs)
        end = clock.mark()
    finally:
        handle.remove()
    clock.sync()
    new_tokens = output[:, inputs["input_ids"].shape[1] :]
    timing = Timing(
        prefill_s=clock.seconds(start, marks["prefill_end"]),
        decode_s=clock.seconds(marks["prefill_end"], end),
        new_tokens=int(new_tokens.shape[1]),
        peak_memory_bytes=int(torch.cuda.max_memory_allocated(device)) if clock.cuda else None,
        kv_cache_bytes=marks["kv_bytes"],
    )
    return new_tokens, timing
