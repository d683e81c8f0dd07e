"""Measure one request of a model on one prompt: the prefill, then decoding, timed on the device.

Two ways to run a request:

* ``Meter.request``: one prefill forward (with ``logits_to_keep=1`` where the model takes it, as
  ``generate`` does), then ``prompt.decode_ids`` fed one at a time on its cache (forced tokens, no
  sampling). On the dynamic cache each step is a plain call; on a static cache (a ``StaticCache``
  sized for the prompt and the forced tokens, given to the prefill) each step goes through the
  model's compiled call, the one ``generate`` compiles (``model.get_compiled_call``: torch.compile,
  CUDA graphs), on a GPU; a call at a new shape may compile again, which the caller's warm-up
  rounds absorb and ``RequestTiming.compiled`` reports.
* ``Meter.generate_request``: one whole ``generate`` call (``kvprune.generation.stock_generate``), split
  at the end of its prefill: what a user of stock Hugging Face gets.

Inside the prefill, ``Probes`` marks the audio encoder's span (from its first module's start to its
projector's end), the start of decoder layer K, the last decoder layer's end, and the engine's own work
(a token press's choice and gather at layer K, a cache press's eviction after each layer it compresses).
Every mark is a CUDA event on a GPU (the wall clock on a CPU); the device is synchronised only at the
boundaries. Each mark also keeps the host's clock when it was queued: how far the device reached it after
the host did is the host's *lead* there (the device idle at the start, as a request starts after a sync).
A lead near zero at the encoder's end means the host is not ahead when the decoder layers start, so their
launches, not their kernels, set the LLM part's time (a host-bound prefill); near zero at the last
layer's end, the layers caught up with the host somewhere (a pruned prefill's short layers after K,
typically). Such a prefill follows the host's speed, which can change by 2x within a minute on one
machine (2026-11-29, an H200's host): each request's start also times a fixed Python loop
(``host_loop_ns``), so a report shows how fast the host was.
"""

from __future__ import annotations

import inspect
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
from transformers import StaticCache

from kvprune.compat import cache_argument, output_cache
from kvprune.generation import Clock, GenerationObserver, stock_generate
from kvprune.generation.prefill import forward_prefill, prefill_call, prefill_layers_failed
from kvprune.generation.timing import cache_kind, compile_counters, kv_cache_bytes, kv_held_bytes
from kvprune.models import resolve_family

from ..setup.environment import host_loop_ns
from ..setup.options import ENGINE_CACHE
from .presets import Prompt


def takes_logits_to_keep(model: nn.Module) -> bool:
    """Whether the prefill can compute the last position's logits only, as ``generate`` asks
    (Qwen2.5-Omni and Qwen2-Audio cannot: their LM head runs on every position)."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


@dataclass
class RequestTiming:
    prefill_ms: float  # the forward that fills the cache: time to first token
    encoder_ms: float  # audio encoder + projector, within that forward
    head_ms: float  # from the prefill's start to decoder layer K's (encoder, embedding, layers < K, a press's choice)
    score_ms: float  # the engine's own work within the prefill (NaN without a press)
    decode_ms_per_token: float  # decoding time / decoding steps (NaN: no decoding)
    request_ms: float  # prefill + decoding (NaN: no decoding)
    peak_bytes: float  # device memory allocated at the peak of the request (NaN on CPU)
    base_bytes: float  # device memory allocated when it started: weights, inputs (NaN on CPU)
    kv_bytes: int  # keys + values held after the prefill (a static cache's room for new tokens left out)
    kv_alloc_bytes: int  # the cache's tensors after the prefill (a static cache's room included)
    cache: str  # "dynamic" or "static"
    compiled: bool  # it compiled or captured a CUDA graph inside its timed spans: its timing includes that
    reused_bytes: float = 0.0  # memory it used that an earlier request left allocated (the engine's kept decode
    # state): its cost, though not in peak - base
    decoded_uncompiled: bool = False  # compilation was asked for, but the engine's step for these layers failed to compile
    prefill_uncompiled: bool = False  # --compile-prefill was asked for, but the layers >= K failed to compile
    host_lead_encoder_ms: float = math.nan  # how long after the host queued the encoder's end the device reached it
    host_lead_k_ms: float = math.nan  # the same at decoder layer K's start
    host_lead_end_ms: float = math.nan  # the same at the last decoder layer's end (the prefill's): near 0, host-bound
    layers_ms: float = math.nan  # from the start to the last decoder layer's end: the prefill without the final norm,
    # the head and what follows the forward (the engine's first token and loading of its decode state)
    host_loop_ns: float = math.nan  # the host's speed just before the request (``host_loop_ns()``)

    @property
    def llm_ms(self) -> float:
        """The prefill without its own encoder time: what LLM-side pruning acts on."""
        return self.prefill_ms - self.encoder_ms


class _Mark(NamedTuple):
    name: str
    device: object  # a CUDA event, or the host's clock on a CPU
    host: float  # the host's clock when the mark was queued


class Probes(GenerationObserver):
    """Marks inside one prefill (see the module's docstring), from hooks that remove themselves at
    the end of the model's first forward call, so that decoding steps (compiled or not) see none. As
    the engine's observer, it marks the press's own work once the press is installed."""

    def __init__(self, clock: Clock, model: nn.Module, layer: int | None = None, press=None):
        family = resolve_family(model)
        encoder_start, encoder_end = family.audio_encoder(model)
        layers = family.layers(model)
        self.clock = clock
        self.marks: list[_Mark] = []
        self._host_start = math.nan
        self._host_loop_ns = math.nan
        self._handles = [
            encoder_start.register_forward_pre_hook(self._mark("encoder_start")),
            encoder_end.register_forward_hook(self._mark("encoder_end")),
        ]
        if layer is not None:
            self._handles.append(layers[layer].register_forward_pre_hook(self._mark("layer")))
        self._handles.append(layers[-1].register_forward_hook(self._mark("last_layer")))
        self._layers = layers
        if press is not None:
            self.press_installed(press)
        self._handles.append(model.register_forward_hook(lambda *_: self.close()))

    def press_installed(self, press) -> None:
        """Mark the press's own work: called once the engine's hooks are in place, so that ours go
        first and last around them."""
        layers = self._layers
        for part in press.parts():
            if part.kind == "token":
                self._around(layers[part.layer], "register_forward_pre_hook")
            else:
                for j in range(part.layer, len(layers)):
                    self._around(layers[j], "register_forward_hook")

    def start(self):
        """The request's start mark (the device idle: the caller synchronised), the origin of every span; the
        host's speed is timed just before it."""
        self._host_loop_ns = host_loop_ns()
        mark = self.clock.mark()
        self._host_start = _host_seconds(mark)
        return mark

    def _mark(self, name: str) -> Callable:
        def hook(*_):
            mark = self.clock.mark()
            self.marks.append(_Mark(name, mark, _host_seconds(mark)))

        return hook

    def _around(self, module: nn.Module, register: str) -> None:
        self._handles.append(getattr(module, register)(self._mark("work_start"), prepend=True))
        self._handles.append(getattr(module, register)(self._mark("work_end")))

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def spans(self, start) -> dict[str, float]:
        """Milliseconds of the encoder, from ``start`` (``Probes.start``) to layer K and to the last layer's end, and of
        the engine's work, and the host's lead at the encoder's end, at layer K and at the last layer's end (read after
        a sync)."""

        def ms(a, b) -> float:
            return 1000.0 * self.clock.seconds(a, b)

        def lead(mark: _Mark) -> float:
            return ms(start, mark.device) - 1000.0 * (mark.host - self._host_start)

        named: dict[str, list[_Mark]] = {}
        for mark in self.marks:
            named.setdefault(mark.name, []).append(mark)
        encoder = ms(named["encoder_start"][0].device, named["encoder_end"][-1].device) if "encoder_end" in named else math.nan
        last = named["last_layer"][0] if "last_layer" in named else None
        head = ms(start, named["layer"][0].device) if "layer" in named else math.nan
        work = [ms(a.device, b.device) for a, b in zip(named.get("work_start", []), named.get("work_end", []))]
        return dict(encoder_ms=encoder, head_ms=head, score_ms=sum(work) if work else math.nan,
                    host_lead_encoder_ms=lead(named["encoder_end"][-1]) if "encoder_end" in named else math.nan,
                    host_lead_k_ms=lead(named["layer"][0]) if "layer" in named else math.nan,
                    host_lead_end_ms=lead(last) if last is not None else math.nan,
                    layers_ms=ms(start, last.device) if last is not None else math.nan,
                    host_loop_ns=self._host_loop_ns)


def _host_seconds(mark) -> float:
    """The host's clock when ``mark`` was made: the mark itself where it is the host's clock (on a CPU)."""
    return mark if isinstance(mark, float) else time.perf_counter()


class Meter:
    """Times callables and requests on one device: ``warmup`` untimed runs, then ``repeats`` that count.

    ``compile_config``: how static-cache decoding compiles (None: transformers' default, as
    ``generate`` uses it); ``compile``: whether it does (None: on CUDA only, as ``generate`` does)."""

    def __init__(self, device: torch.device, warmup: int, repeats: int, compile: bool | None = None, compile_config=None):
        if repeats < 1 or warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")
        self.device = device
        self.clock = Clock(device)
        self.warmup = warmup
        self.repeats = repeats
        self.compile = self.clock.cuda if compile is None else compile
        self.compile_config = compile_config

    @property
    def cuda(self) -> bool:
        return self.clock.cuda

    def sync(self) -> None:
        self.clock.sync()

    def ms(self, start, end) -> float:
        return 1000.0 * self.clock.seconds(start, end)

    def median_ms(self, fn: Callable[[], object]) -> float:
        """Median of ``once_ms(fn)`` over the timed runs, after the warm-up."""
        samples = [self.once_ms(fn) for _ in range(self.warmup + self.repeats)]
        return statistics.median(samples[self.warmup :])

    @torch.no_grad()
    def once_ms(self, fn: Callable[[], object]) -> float:
        """One timed run of ``fn`` (for callers that interleave their own repetitions)."""
        self.sync()
        start = self.clock.mark()
        fn()
        end = self.clock.mark()
        self.sync()
        return self.ms(start, end)

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

    # -- requests ------------------------------------------------------------------------------------
    def _start(self) -> float:
        self.sync()
        if not self.cuda:
            return math.nan
        torch.cuda.reset_peak_memory_stats(self.device)
        return float(torch.cuda.memory_allocated(self.device))

    def _peak(self) -> float:
        return float(torch.cuda.max_memory_allocated(self.device)) if self.cuda else math.nan

    def compiles(self, cache: str, generate: bool) -> bool:
        """Whether decoding on ``cache`` is compiled: a static cache, on CUDA (``generate``'s rule),
        or wherever this meter was told to compile (forward path) or given a compile config that
        compiles on every device (generate path)."""
        if cache == ENGINE_CACHE:
            return self.compile  # the engine compiles its decode step where asked (on CUDA by default)
        if cache != "static":
            return False
        if generate:
            return self.cuda or bool(getattr(self.compile_config, "_compile_all_devices", False))
        return self.compile

    def decode_step(self, model: nn.Module) -> Callable:
        """What a static-cache decoding step calls: the model's compiled call (the one ``generate``
        compiles) when compiling, else the model itself."""
        return model.get_compiled_call(self.compile_config) if self.compile else model

    @torch.no_grad()
    def request(self, model: nn.Module, prompt: Prompt, probes: Probes, cache: str = "dynamic", decode: bool = True) -> RequestTiming:
        """The prefill, then (``decode``) the forced tokens on its cache, ``cache`` being "dynamic" or
        "static"; or, with ``cache="engine"`` and no decoding, the engine's prefill call alone, as ``Generator``
        makes it (``prefill_call``: its position ids, no attention mask without padding; ``forward_prefill``: the
        head on the last position), on its dynamic cache: the ideal beside presses that run on the engine.
        Repetition and medians are the caller's."""
        name = cache_argument(resolve_family(model).decoder(model))
        prefill_kwargs = {"logits_to_keep": 1} if takes_logits_to_keep(model) else {}
        steps = prompt.decode_ids if decode else []
        if cache == ENGINE_CACHE and steps:
            raise ValueError("Meter.request runs the engine's prefill call alone; a whole call is engine_request.")
        if cache == "static":
            prefill_kwargs[name] = StaticCache(config=model.config, max_cache_len=prompt.seq_len + len(steps))
        step = self.decode_step(model) if cache == "static" else model
        entry = resolve_family(model).entry(model)

        def prefill():
            if cache == ENGINE_CACHE:
                return forward_prefill(entry, prefill_call(entry, prompt.inputs))
            return model(**prompt.inputs, use_cache=True, **prefill_kwargs)

        graphs = compile_counters()[0]
        base = self._start()
        start = probes.start()
        output = prefill()
        prefilled = self.clock.mark()
        _check_finite(output.logits)
        kv = output_cache(output)
        kv_alloc, kv_held, kind = kv_cache_bytes(kv), kv_held_bytes(kv, prompt.seq_len), cache_kind(kv)
        del output
        decoding = self.clock.mark()  # after the check above, which waits for the device
        for token in steps:
            kv = output_cache(step(input_ids=token, use_cache=True, **{name: kv}))
        end = self.clock.mark()
        self.sync()
        prefill_ms, decode_ms = self.ms(start, prefilled), self.ms(decoding, end)
        return RequestTiming(
            prefill_ms=prefill_ms,
            **probes.spans(start),
            decode_ms_per_token=decode_ms / len(steps) if steps else math.nan,
            request_ms=prefill_ms + decode_ms if steps else math.nan,
            peak_bytes=self._peak(),
            base_bytes=base,
            kv_bytes=kv_held,
            kv_alloc_bytes=kv_alloc,
            cache=kind,
            compiled=compile_counters()[0] > graphs,
            prefill_uncompiled=cache == ENGINE_CACHE and prefill_layers_failed(entry),
        )

    @torch.no_grad()
    def engine_request(self, generator, prompt: Prompt, probes: Probes, press=None, rows: int = 1) -> tuple[RequestTiming, object]:
        """One call of kvprune's generation engine (``kvprune.Generator``): ``len(prompt.decode_ids)``
        new tokens per row (greedy, the audio placeholder suppressed, never an end of sequence). The
        ``rows`` of a batch are the one-row ``prompt`` given ``rows`` times, prefilled once and decoded
        together (the engine copies the prefilled cache into every row): its prefill time counts that
        prefill once per row, as separate requests would. Returns the timing and the press's outcome."""
        model = generator.model
        new_tokens = len(prompt.decode_ids)
        base = self._start()
        start = probes.start()
        out = generator.generate([prompt.inputs] * rows, max_new_tokens=new_tokens, press=press, eos_token_id=[],
                                 suppress_tokens=[resolve_family(model).audio_token_id(model)], pad_token_id=0,
                                 observer=probes)
        self.sync()
        timing = out.timing  # one prefill per row, as separate requests would make; the rows' loading once
        prefill_ms = 1000.0 * (out.first_prefill_s * rows + timing.prefill_s - out.first_prefill_s)
        decode_ms = 1000.0 * timing.decode_s
        steps = out.new_tokens.shape[1] - 1
        timing = RequestTiming(
            prefill_ms=prefill_ms,
            **probes.spans(start),
            decode_ms_per_token=decode_ms / steps if steps else math.nan,
            request_ms=prefill_ms + decode_ms if steps else math.nan,
            peak_bytes=self._peak(),
            base_bytes=base,
            kv_bytes=timing.kv_held_bytes,
            kv_alloc_bytes=timing.kv_cache_bytes,
            cache=ENGINE_CACHE,  # the request's cache, even where the engine fell back to stock generate
            compiled=out.compiled_in_timing,
            reused_bytes=0.0 if out.new_state else float(timing.kv_cache_bytes),
            decoded_uncompiled=bool(generator.compile) and out.step_compiled is False,
            prefill_uncompiled=prefill_layers_failed(generator.module),
        )
        outcome = out.outcome[0] if isinstance(out.outcome, list) else out.outcome
        return timing, outcome

    @torch.no_grad()
    def generate_request(self, model: nn.Module, prompt: Prompt, probes: Probes, cache: str = "dynamic") -> RequestTiming:
        """One ``generate`` call of exactly ``len(prompt.decode_ids)`` new tokens (greedy, the audio
        placeholder suppressed: random weights may pick anything), on the cache ``generate`` makes:
        its dynamic cache, or with ``cache="static"`` its static cache, compiled on a GPU."""
        new_tokens = len(prompt.decode_ids)
        kwargs = dict(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                      suppress_tokens=[resolve_family(model).audio_token_id(model)], pad_token_id=0)
        if cache == "static":
            kwargs["cache_implementation"] = "static"
            if self.compile_config is not None:
                kwargs["compile_config"] = self.compile_config
        base = self._start()
        start = probes.start()
        _, timing = stock_generate(model, prompt.inputs, **kwargs)
        steps = timing.new_tokens - 1  # the first token comes from the prefill
        return RequestTiming(
            prefill_ms=1000.0 * timing.prefill_s,
            **probes.spans(start),
            decode_ms_per_token=1000.0 * timing.decode_s / steps if steps else math.nan,
            request_ms=1000.0 * (timing.prefill_s + timing.decode_s),
            peak_bytes=self._peak(),
            base_bytes=base,
            kv_bytes=timing.kv_held_bytes,
            kv_alloc_bytes=timing.kv_cache_bytes,
            cache=timing.cache,
            compiled=timing.compiled,
        )


def _check_finite(logits: torch.Tensor) -> None:
    if not bool(torch.isfinite(logits[:, -1]).all()):
        raise ValueError("the prefill's logits are not finite: the random weights make timings unrepresentative")
