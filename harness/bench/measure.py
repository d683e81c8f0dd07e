"""Measure a model on one prompt: a whole request (prefill, then forced decode steps) and the LLM's
decoder layers alone. Medians over repeats after warm-up; CUDA events on a GPU (synchronised at the
boundaries), the wall clock on a CPU (for tests only)."""

from __future__ import annotations

import inspect
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from kvprune.compat import CACHE_NAMES, output_cache
from kvprune.models import resolve_family

from .presets import Prompt
from ..timing import Clock, kv_cache_bytes


def _forward_parameters(model: nn.Module):
    return inspect.signature(model.forward).parameters


def cache_argument(model: nn.Module) -> str:
    """The name this transformers version gives the cache argument (``cache`` or ``past_key_values``),
    read from the text decoder, which declares it even where the model passes it on as a keyword."""
    return next(name for name in CACHE_NAMES if name in _forward_parameters(resolve_family(model).decoder(model)))


def takes_logits_to_keep(model: nn.Module) -> bool:
    """Whether the prefill can compute the last position's logits only, as ``generate`` asks
    (Qwen2.5-Omni and Qwen2-Audio cannot: their LM head runs on every position)."""
    return "logits_to_keep" in _forward_parameters(model)


def logits_rows(model: nn.Module, seq_len: int) -> int:
    """Rows the prefill's LM head computes on a ``seq_len`` sequence."""
    return 1 if takes_logits_to_keep(model) else seq_len


@dataclass
class RequestTiming:
    prefill_ms: float  # the forward that fills the cache: time to first token
    encoder_ms: float  # audio encoder + projector, within that forward
    decode_ms_per_token: float
    peak_bytes: float  # device memory allocated at the peak of the request (NaN on CPU)
    kv_bytes: int  # keys + values of every layer after the prefill


class Meter:
    """Times callables on one device: ``warmup`` untimed runs, then the median of ``repeats``."""

    def __init__(self, device: torch.device, warmup: int, repeats: int):
        if repeats < 1 or warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")
        self.device = device
        self.clock = Clock(device)
        self.warmup = warmup
        self.repeats = repeats

    @property
    def cuda(self) -> bool:
        return self.clock.cuda

    def sync(self) -> None:
        self.clock.sync()

    def ms(self, start, end) -> float:
        return 1000.0 * self.clock.seconds(start, end)

    def _samples(self, run_once: Callable[[], object]) -> list:
        """``run_once()`` for the warm-up runs, then for the ``repeats`` that count: their results."""
        return [run_once() for _ in range(self.warmup + self.repeats)][self.warmup :]

    def median_ms(self, fn: Callable[[], object]) -> float:
        """Median of ``once_ms(fn)`` over the timed runs, after the warm-up."""
        return statistics.median(self._samples(lambda: self.once_ms(fn)))

    @torch.no_grad()
    def extra_peak_bytes(self, fn: Callable[[], object]) -> float:
        """Device memory ``fn`` allocates at its peak beyond what was already allocated (NaN on CPU)."""
        if not self.cuda:
            return math.nan
        self.sync()
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        fn()
        self.sync()
        return float(torch.cuda.max_memory_allocated(self.device) - base)

    @torch.no_grad()
    def request(self, model: nn.Module, prompt: Prompt, encoder: tuple[nn.Module, nn.Module]) -> RequestTiming:
        """One request: the prefill, then ``prompt.decode_ids`` fed one at a time on the cache (no
        sampling). The encoder's share of the prefill is timed between a pre-hook on ``encoder[0]``
        and a hook on ``encoder[1]``. Repetition and medians are the caller's (see ``median_timing``)."""
        marks: list = []
        hooks = [
            encoder[0].register_forward_pre_hook(lambda *_: marks.append(("start", self.clock.mark()))),
            encoder[1].register_forward_hook(lambda *_: marks.append(("end", self.clock.mark()))),
        ]
        try:
            return self._timed_request(model, prompt, marks)
        finally:
            for hook in hooks:
                hook.remove()

    def _timed_request(self, model: nn.Module, prompt: Prompt, marks: list) -> RequestTiming:
        cache_name = cache_argument(model)
        prefill_extra = {"logits_to_keep": 1} if takes_logits_to_keep(model) else {}
        self.sync()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        start = self.clock.mark()
        output = model(**prompt.inputs, use_cache=True, **prefill_extra)
        prefilled = self.clock.mark()
        _check_finite(output.logits)
        cache = output_cache(output)
        kv_bytes = kv_cache_bytes(cache)
        del output
        decoding = self.clock.mark()
        for token in prompt.decode_ids:
            cache = output_cache(model(input_ids=token, use_cache=True, **{cache_name: cache}))
        end = self.clock.mark()
        self.sync()
        return RequestTiming(
            prefill_ms=self.ms(start, prefilled),
            encoder_ms=_span_ms(self, marks),
            decode_ms_per_token=self.ms(decoding, end) / max(1, len(prompt.decode_ids)),
            peak_bytes=float(torch.cuda.max_memory_allocated(self.device)) if self.cuda else math.nan,
            kv_bytes=kv_bytes,
        )

    @torch.no_grad()
    def once_ms(self, fn: Callable[[], object]) -> float:
        """One timed run of ``fn`` (for callers that interleave their own repetitions)."""
        self.sync()
        start = self.clock.mark()
        fn()
        end = self.clock.mark()
        self.sync()
        return self.ms(start, end)

    def layers_ms(self, model: nn.Module, start: int, stop: int, length: int, lm_rows: int) -> float:
        """Median time of ``layers_run`` (warm-up and repeats as configured)."""
        return self.median_ms(layers_run(model, start, stop, length, lm_rows))


def layers_run(model: nn.Module, start: int, stop: int, length: int, lm_rows: int) -> Callable[[], None]:
    """A run of the text decoder with only ``layers[start:stop]`` on ``length`` random embeddings
    (cache written, as in a prefill), then the LM head on the last ``lm_rows`` positions (0: none)."""
    decoder = resolve_family(model).decoder(model)
    head = model.get_output_embeddings()
    parameter = next(decoder.parameters())
    embeds = torch.randn(1, length, decoder.config.hidden_size, device=parameter.device, dtype=parameter.dtype)

    @torch.no_grad()
    def run() -> None:
        layers = decoder.layers
        decoder.layers = layers[start:stop]
        try:
            hidden = decoder(inputs_embeds=embeds, use_cache=True).last_hidden_state
            if lm_rows:
                head(hidden[:, -lm_rows:])
        finally:
            decoder.layers = layers

    return run


def _check_finite(logits: torch.Tensor) -> None:
    if not bool(torch.isfinite(logits[:, -1]).all()):
        raise ValueError("the prefill's logits are not finite: the random weights make timings unrepresentative")


def _span_ms(meter: Meter, marks: list) -> float:
    """From the encoder's first start to its last end within one prefill."""
    starts = [mark for kind, mark in marks if kind == "start"]
    ends = [mark for kind, mark in marks if kind == "end"]
    return meter.ms(starts[0], ends[-1]) if starts and ends else math.nan


def median_timing(samples: list[RequestTiming]) -> RequestTiming:
    """Medians of the timings of repeated requests; the peak memory is the largest seen."""

    def median(name):
        return statistics.median(getattr(s, name) for s in samples)

    return RequestTiming(
        prefill_ms=median("prefill_ms"),
        encoder_ms=median("encoder_ms"),
        decode_ms_per_token=median("decode_ms_per_token"),
        peak_bytes=max(s.peak_bytes for s in samples),
        kv_bytes=samples[-1].kv_bytes,
    )
