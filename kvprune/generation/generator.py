"""kvprune's generation engine: prefill under a press, then decode on static caches of the pruned lengths
with a compiled step replayed as a CUDA graph, one replay per token and no host synchronisation
between tokens (stops are checked on the device, and read back every ``check_every`` tokens).

``Generator`` keeps its decode states (buffers sized by length buckets) and their captured graphs
across calls, so a sweep over thousands of prompts of different lengths compiles once and captures
one graph per bucket shape it meets, within a memory budget (least recently used states go first).
``generate`` is the one-call form. On a CPU the same step runs eagerly: the same algorithm, which the
tests compare token for token with ``model.generate`` under the same press.

Models whose caches cannot be static (sliding-window layers, layers reading another layer's cache:
Gemma-3n) and attention implementations that cannot mask per layer (flash attention) decode through
``model.generate`` instead; ``GenerationOutput.engine`` says which path ran and why.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn

from ..compat import cache_argument, kv_cache_bytes, output_cache
from ..compiling import out_of_memory
from ..models import resolve_family
from .arguments import batches_of, model_of, press_of
from .attention import decoding_attention, unsupported_attention
from .clock import Clock
from .decode_state import DecodeState, state_shape
from .graphs import StepRunner, compile_counters
from .prefill import Prefill, family_supports_static_decoding, run_prefill
from .step import Sampling, Stopping, choose, decode_step, finish

ENGINE, FALLBACK = "kvprune", "transformers.generate"


@dataclass
class GenerationTiming:
    """Seconds of one call: the prefill (to the first token) and the decoding after it."""

    prefill_s: float
    decode_s: float
    new_tokens: int  # generated per row (the longest row; ended rows are padded)
    batch: int
    first_prefill_s: float = 0.0  # the first batch's prefill alone (within ``prefill_s``)
    capture_s: float = 0.0  # between prefill and decoding: capturing the decode step's CUDA graph (and compiling
    # it) when this call met a new state; the token loop's time, ``decode_s``, is after it

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens after the first, over all rows, per second of decoding."""
        decoded = (self.new_tokens - 1) * self.batch
        return decoded / self.decode_s if decoded > 0 and self.decode_s > 0 else None


@dataclass
class GenerationOutput:
    sequences: torch.Tensor  # (B, prompt + new): the prompt followed by the new tokens, as generate returns
    new_tokens: torch.Tensor  # (B, new)
    timing: GenerationTiming
    outcome: object | None = None  # the press's PressOutcome (what its prefill pruned)
    engine: str = ENGINE  # which path decoded: kvprune's engine, or transformers.generate (and why, in ``note``)
    note: str = ""
    graphs_captured: int = 0  # CUDA graphs this call captured (0: replayed existing ones, or none used)
    compilations: int = 0  # torch.compile graphs this call made
    kv_held_bytes: int = 0  # after the prefill: the keys and values the prompts left in every layer's cache
    cache_bytes: int = 0  # the decode state's buffers (bucketed room for the new tokens included)
    new_state: bool = False  # this call allocated its decode state (False: it refilled one kept from an earlier call)
    step_compiled: bool | None = None  # its decoding ran a compiled step (None: no decoding step; see ``fallbacks``)


@dataclass
class Generator:
    """Generation with kvprune's engine on one model (a ``LoadedModel`` is taken for its model); keeps
    compiled steps and decode states across calls.

    * ``compile``: compile the decode step with ``torch.compile`` ("auto": on CUDA).
    * ``cuda_graphs``: capture each decode state's step as a CUDA graph ("auto": on CUDA).
    * ``fast_linear``: run the compiled step's linear layers through ``gemv.grouped_linear`` (Triton
      matrix-vector kernels, projections of one input in one launch; "auto": when compiling on CUDA).
    * ``fused_attention``: the decode step's attention as one fused Triton kernel on CUDA
      (``decode_attention``); False: two matrix products and a softmax, as on the CPU.
    * ``per_octave``: length buckets per power of two (more: less padding, more shapes).
    * ``max_state_bytes``: device memory decode states may keep between calls (least recently used go);
      "auto": on CUDA, 3/4 of the memory free when the generator is made (the model loaded), else 8 GiB.
      A call that runs out of memory while earlier calls' states are kept drops them and runs again once.
    * ``check_every``: tokens between reads of the stop flags (the only host synchronisation).
    """

    model: nn.Module
    compile: bool | str = "auto"
    cuda_graphs: bool | str = "auto"
    compile_mode: str | None = None
    fast_linear: bool | str = "auto"
    fused_attention: bool = True
    per_octave: int = 8
    max_state_bytes: int | str = "auto"
    check_every: int = 16
    _states: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _runners: dict = field(default_factory=dict, init=False, repr=False)
    _made: int = field(default=0, init=False, repr=False)  # decode states allocated so far
    _stoppings: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.model = model_of(self.model)  # a LoadedModel: its model
        self.family = resolve_family(self.model)
        self.module = self.family.entry(self.model)  # the module whose forward returns logits
        self.config = self.family.decoder(self.model).config
        self.device = next(self.module.parameters()).device
        cuda = self.device.type == "cuda"
        self.compile = cuda if self.compile == "auto" else bool(self.compile)
        self.cuda_graphs = cuda if self.cuda_graphs == "auto" else bool(self.cuda_graphs)
        self.fast_linear = (cuda and self.compile) if self.fast_linear == "auto" else bool(self.fast_linear)
        if self.cuda_graphs and not cuda:
            raise ValueError("cuda_graphs=True needs the model on a CUDA device.")
        if self.max_state_bytes == "auto":
            self.max_state_bytes = int(0.75 * torch.cuda.mem_get_info(self.device)[0]) if cuda else 8 << 30
        self.unsupported = family_supports_static_decoding(self.module) or unsupported_attention(self.config)

    # -- public ---------------------------------------------------------------------------------------
    def generate(
        self, inputs: dict | Sequence[dict], *, max_new_tokens: int, press=None, ratio: float | None = None,
        do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
        eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None,
        suppress_tokens: list[int] | None = None, on_press=None,
    ) -> GenerationOutput:
        """Generate up to ``max_new_tokens`` per row under ``press`` at ``ratio`` (its own ratio if None;
        no press: unpruned; a registered press's name builds it). ``inputs`` is a batch of model inputs (as
        ``LoadedModel.build_inputs`` or a processor makes them, left-padded), or a list of such batches: each is prefilled on its own (so that one prefill's activations, not
        the whole batch's, bound the memory), then all rows decode together; a batch repeated as the
        same object (``[inputs] * 16``: sixteen answers to one prompt) is prefilled once. ``on_press``:
        see ``prefill.run_prefill`` (instruments)."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} is invalid: generate at least 1 token.")
        batches, press = batches_of(inputs), press_of(press)
        sampling = Sampling(do_sample, temperature, top_k, top_p)
        eos, pad = self._special_tokens(eos_token_id, pad_token_id)
        if self.unsupported:
            return self._fallback(batches, press, ratio, max_new_tokens, sampling, eos, pad, suppress_tokens, on_press)
        arguments = (batches, press, ratio, max_new_tokens, sampling, eos, pad, suppress_tokens, on_press)
        kept = bool(self._states)
        try:
            return self._generate(*arguments)
        except Exception as error:  # kept states give way to the work: once, then the error is the caller's
            if not (kept and out_of_memory(error)):
                raise
        self.forget_states()
        return self._generate(*arguments)

    def tokens_generated(self, answer_tokens: int, max_new_tokens: int) -> int:
        """Tokens a call generates per row when its longest row's answer ends after ``answer_tokens`` (its
        end token included): stops are read every ``check_every`` steps, so decoding runs on to that check."""
        steps = self.check_every * max(1, -(-(answer_tokens - 1) // self.check_every))
        return min(max_new_tokens, 1 + steps)

    def forget_states(self) -> None:
        """Drop the kept decode states, their CUDA graphs and the graphs' memory pools (compiled steps stay):
        memory back to the allocator, e.g. before a batch that needs all of it."""
        self._states.clear()
        for runner in self._runners.values():
            runner.release_pool()

    def _generate(self, batches, press, ratio, max_new_tokens, sampling, eos, pad, suppress_tokens, on_press) -> GenerationOutput:
        graphs_before, (compiled_before, _) = self._captures(), compile_counters()
        made_before = self._made
        clock = Clock(self.device)
        start = clock.mark()
        rows = sum(batch["input_ids"].shape[0] for batch in batches)
        longest = max(batch["input_ids"].shape[1] for batch in batches)
        state, stopping, firsts, outcomes, offset, held, first_end = None, None, [], [], 0, 0, None
        previous = None
        for batch in batches:
            # a batch given again as the same object (several answers to one prompt) is prefilled once
            prefill = previous[1] if previous is not None and previous[0] is batch else run_prefill(self.module, batch, press, ratio, on_press)
            previous = (batch, prefill)
            first_end = first_end or clock.mark()
            stopping = stopping or self._stopping(eos, pad, suppress_tokens, prefill.logits.shape[-1])
            first = choose(prefill.logits, sampling, stopping)
            first, done = finish(first, torch.zeros_like(first, dtype=torch.bool), stopping)
            if max_new_tokens > 1:
                state = self._state_for(state, prefill, rows, max_new_tokens, offset, longest / batch["input_ids"].shape[1])
                state.load(prefill, offset, first, done)
            firsts.append(first)
            outcomes.append(prefill.outcome)
            held += sum(t.numel() * t.element_size() for entries in prefill.layers for t in (entries.keys, entries.values))
            offset += prefill.batch
            del prefill  # its cache is in the decode state now: one batch's cache at a time (or the repeated one's)
        prefill_end = clock.mark()
        loop_start = prefill_end
        compiled = None
        if state is not None:
            new, loop_start, compiled = self._decode(state, rows, max_new_tokens, sampling, stopping, clock)
        else:
            new = torch.cat(firsts)[:, None]
        end = clock.mark()
        new = _trim(new, eos)
        timing = GenerationTiming(clock.seconds(start, prefill_end), clock.seconds(loop_start, end), new.shape[1], rows,
                                  clock.seconds(start, first_end), clock.seconds(prefill_end, loop_start))
        return GenerationOutput(
            sequences=_joined([batch["input_ids"] for batch in batches], new, pad), new_tokens=new, timing=timing,
            outcome=outcomes[0] if len(outcomes) == 1 else outcomes, graphs_captured=self._captures() - graphs_before,
            compilations=compile_counters()[0] - compiled_before, kv_held_bytes=held,
            cache_bytes=state.nbytes if state is not None else 0, new_state=self._made > made_before, step_compiled=compiled,
        )

    @property
    def fallbacks(self) -> dict[str, int]:
        """Why decode states ran without a CUDA graph (reason -> how many states), over all calls."""
        merged: dict[str, int] = {}
        for runner in self._runners.values():
            for reason, count in runner.fallbacks.items():
                merged[reason] = merged.get(reason, 0) + count
        return merged

    @property
    def captures(self) -> int:
        """CUDA graphs captured so far (one per decode state and way of choosing tokens)."""
        return self._captures()

    @property
    def state_bytes(self) -> int:
        """Device memory held by the decode states kept between calls (cache buffers of every shape met)."""
        return sum(state.nbytes for state in self._states.values())

    @property
    def states(self) -> int:
        return len(self._states)

    # -- decoding -------------------------------------------------------------------------------------
    def _state_for(self, state: DecodeState | None, prefill: Prefill, rows: int, max_new_tokens: int, offset: int,
                   stretch: float) -> DecodeState:
        """The decode state for ``rows`` rows that this prefill's rows fit: the one in use if it has room
        (a later prefilled batch may hold more entries), else a kept or new one of a larger bucket, with
        the rows loaded so far copied over. The first is sized for the longest prompt of the call
        (``stretch``: its length over this prefill's, the kept entries scaled alike), so that a call
        rarely grows through states (each a new allocation and graph capture)."""
        if state is None:
            first = self._state(state_shape(prefill, rows, max_new_tokens, self.per_octave, stretch), prefill)
            first.reset()  # a kept state holds an earlier call's rows and step
            return first
        needed = state_shape(prefill, rows, max_new_tokens, self.per_octave)
        if state.shape.fits(needed):
            return state
        needed = replace(needed, capacities=tuple(map(max, needed.capacities, state.shape.capacities)))  # per group
        grown = self._state(needed, prefill)
        grown.reset()
        grown.copy_rows_from(state, offset)
        return grown

    def _decode(self, state: DecodeState, rows: int, max_new_tokens: int, sampling, stopping, clock) -> tuple[torch.Tensor, object, bool]:
        """The new tokens, the clock's mark where the token loop began (after a graph capture, if any), and
        whether the step ran compiled."""
        runner = self._runner(sampling, stopping, state.shape.batch)
        with torch.no_grad(), decoding_attention(self.config):
            runner.prepare(state)
            loop_start = clock.mark()
            for step in range(1, max_new_tokens):
                runner.run(state)
                if step % self.check_every == 0 and bool(state.done.all()):
                    break
        return state.out[:rows, :max_new_tokens].clone(), loop_start, runner.compiled_for(state)

    def _state(self, shape, template: Prefill) -> DecodeState:
        """A kept state of ``shape``, or a new one (the least recently used go beyond ``max_state_bytes``)."""
        state = self._states.pop(shape, None)
        if state is None:
            state = DecodeState(shape, template)
            self._made += 1
        self._states[shape] = state  # most recently used last
        while len(self._states) > 1 and self.state_bytes > self.max_state_bytes:
            self._states.popitem(last=False)
        return state

    def _runner(self, sampling: Sampling, stopping: Stopping, batch: int) -> StepRunner:
        """One runner (one compiled step) per way of choosing tokens and batch size (cache lengths are
        dynamic within it; a batch size that changes inside one compiled step trips torch 2.11's guards:
        "sources must not be empty for symbol"); stop tokens are state, not code."""
        key = (batch, sampling, stopping.key)
        if key not in self._runners:
            module, cache_name, fused = self.module, cache_argument(self.family.decoder(self.model)), self.fused_attention

            def step(state: DecodeState) -> None:
                decode_step(module, state, sampling, stopping, cache_name, fused)

            # torch.compile keys its compiled code and its dynamic-shape decisions by code object: one per
            # batch size, so that only cache lengths become dynamic within it
            step.__code__ = step.__code__.replace(co_name=f"decode_step_batch_{batch}")

            self._runners[key] = StepRunner(step, self.compile, self.cuda_graphs, self.compile_mode, self.fast_linear)
        return self._runners[key]

    def _captures(self) -> int:
        return sum(runner.captures for runner in self._runners.values())

    # -- tokens ---------------------------------------------------------------------------------------
    def _special_tokens(self, eos_token_id, pad_token_id) -> tuple[list[int], int]:
        config = getattr(self.module, "generation_config", None)
        if eos_token_id is None and config is not None:
            eos_token_id = config.eos_token_id
        eos = [] if eos_token_id is None else [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        if pad_token_id is None and config is not None:
            pad_token_id = config.pad_token_id
        pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
        return eos, int(pad)

    def _stopping(self, eos, pad, suppress_tokens, vocab: int) -> Stopping:
        """The stop tensors of these settings, made once per generator (each call would otherwise copy them in)."""
        key = (tuple(eos), pad, tuple(suppress_tokens or ()), vocab)
        if key not in self._stoppings:
            self._stoppings[key] = Stopping.on_device(eos, pad, list(suppress_tokens or ()), vocab, self.device)
        return self._stoppings[key]

    def _fallback(self, batches, press, ratio, max_new_tokens, sampling, eos, pad, suppress_tokens, on_press) -> GenerationOutput:
        """``model.generate`` (on its dynamic cache), batch by batch, for a model the engine cannot decode."""
        clock = Clock(self.device)
        start = clock.mark()
        marks: dict = {}

        def after_prefill(module, args, output) -> None:  # each batch's first forward is its prefill
            if not marks["in_batch"]:
                marks.setdefault("prefill_end", clock.mark())
                marks["held"] = marks.get("held", 0) + kv_cache_bytes(output_cache(output))
                marks["in_batch"] = True

        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=sampling.do_sample, pad_token_id=pad,
                      eos_token_id=eos or None, suppress_tokens=suppress_tokens)
        if sampling.do_sample:
            kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
        news, outcomes = [], []
        for batch in batches:
            marks["in_batch"] = False
            handle = self.module.register_forward_hook(after_prefill)
            session = press(self.module, ratio) if press is not None else None
            try:
                with torch.no_grad(), session if session is not None else nullcontext() as outcome:
                    if on_press is not None and outcome is not None:
                        on_press(outcome.press)
                    sequences = self.module.generate(**batch, **kwargs)
            finally:
                handle.remove()
            news.append(sequences[:, batch["input_ids"].shape[1] :])
            outcomes.append(outcome)
        end = clock.mark()
        width = max(new.shape[1] for new in news)
        new = torch.cat([torch.nn.functional.pad(n, (0, width - n.shape[1]), value=pad) for n in news])
        timing = GenerationTiming(clock.seconds(start, marks["prefill_end"]), clock.seconds(marks["prefill_end"], end),
                                  new.shape[1], new.shape[0])
        return GenerationOutput(
            _joined([b["input_ids"] for b in batches], new, pad), new, timing,
            outcomes[0] if len(outcomes) == 1 else outcomes, engine=FALLBACK, note=self.unsupported,
            kv_held_bytes=marks.get("held", 0),
        )


def generate(model, inputs, *, max_new_tokens: int, press=None, ratio: float | None = None, **kwargs) -> GenerationOutput:
    """One call of kvprune's generation engine on ``model`` (a module or a ``LoadedModel``; see
    ``Generator``, and keep one to reuse its compiled steps and graphs across calls)."""
    return Generator(model).generate(inputs, max_new_tokens=max_new_tokens, press=press, ratio=ratio, **kwargs)


def _joined(prompts: list[torch.Tensor], new: torch.Tensor, pad: int) -> torch.Tensor:
    """Prompts followed by their new tokens, as ``generate`` returns them; prompts of batches of different
    lengths are left-padded to the longest (the new tokens start in one column)."""
    width = max(p.shape[1] for p in prompts)
    prompts = [torch.nn.functional.pad(p, (width - p.shape[1], 0), value=pad) for p in prompts]
    return torch.cat([torch.cat(prompts), new.to(prompts[0].device)], dim=1)


def _trim(new: torch.Tensor, eos: list[int]) -> torch.Tensor:
    """Cut the steps after every row has ended (its end token included), as ``generate`` stops."""
    if not eos:
        return new
    ended = torch.isin(new, torch.tensor(eos, device=new.device))
    if not bool(ended.any(dim=1).all()):
        return new
    return new[:, : int(ended.float().argmax(dim=1).max()) + 1]
