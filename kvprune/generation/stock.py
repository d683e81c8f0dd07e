"""Stock Hugging Face ``generate``, timed: ``stock_generate`` runs ``module.generate(**inputs)`` once and
splits its time at the end of the prefill (time to first token; decode = the rest of the same call).

The split point is the end of the first forward pass of the module that generates (its prefill), caught
with a forward hook that then removes itself (so a compiled decode step never traces it); no second
generate or second prefill is ever timed. On CUDA the boundaries are CUDA events, read once at the end;
on a CPU, the wall clock. With ``cache_implementation="static"`` on a GPU, ``generate`` compiles its
decode step, and may again at a new shape: ``Timing.compiled`` says whether the call compiled anything.

What runs it: the engine's fallback for models it cannot decode (``Generator``), and the harness's
``--cache static|dynamic`` rows and the bench's stock rows.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..compat import output_cache
from .request import GenerationObserver
from .timing import Clock, Timing, cache_kind, compile_counters, kv_cache_bytes, kv_held_bytes


def stock_generate(module: nn.Module, inputs: dict, observer: GenerationObserver | None = None,
                   **generate_kwargs) -> tuple[torch.Tensor, Timing]:
    """``module.generate(**inputs, **generate_kwargs)`` once: its new tokens (B, new) and its ``Timing``
    (``peak_memory_bytes`` is the caller's to measure: it resets the device's peak counter around what it
    times). ``observer`` is told where the prefill ends and decoding starts and ends."""
    observer = observer or GenerationObserver()
    clock = Clock(next(module.parameters()).device)
    prompt_len = inputs["input_ids"].shape[1]
    after: dict = {}

    def after_prefill(_module, _args, output) -> None:
        after["mark"] = clock.mark()
        cache = output_cache(output)
        after.update(kv_cache_bytes=kv_cache_bytes(cache), kv_held_bytes=kv_held_bytes(cache, prompt_len), cache=cache_kind(cache))
        # gone before the first decoding step: generate may compile those calls (static cache), and a
        # hook that records CUDA events must not be traced into the compiled graph
        handle.remove()
        observer.prefill_ended()
        observer.decoding_started()

    handle = module.register_forward_hook(after_prefill)
    graphs = compile_counters()[0]
    try:
        start = clock.mark()
        output = module.generate(**inputs, **generate_kwargs)
        end = clock.mark()
    finally:
        handle.remove()
    observer.decoding_ended()
    new_tokens = output[:, prompt_len:]
    timing = Timing(
        prefill_s=clock.seconds(start, after["mark"]), decode_s=clock.seconds(after["mark"], end),
        new_tokens=int(new_tokens.shape[1]), kv_cache_bytes=after["kv_cache_bytes"], kv_held_bytes=after["kv_held_bytes"],
        cache=after["cache"], compiled=compile_counters()[0] > graphs,
    )
    return new_tokens, timing
