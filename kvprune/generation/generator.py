"""kvprune's generation engine: prefill under a press, then decode on static caches of the pruned lengths
with a compiled step replayed as a CUDA graph, one replay per token; the host synchronises only to read
the stop flags (set on the device) after steps 1, 2, 4, ... then every ``check_every`` tokens.

``Generator`` keeps its decode states (buffers sized by length buckets) and their captured graphs across calls, so a
sweep over thousands of prompts of different lengths compiles once and captures one graph per bucket shape it meets,
within a memory budget (least recently used states go first). ``generate`` is the one-call form. On a CPU the same
step runs eagerly: the same algorithm, which the tests compare token for token with ``model.generate``.

Models whose caches cannot be static (sliding-window layers, layers reading another layer's cache:
Gemma-3n) and attention implementations that cannot mask per layer (flash attention) decode through
``model.generate`` instead; ``GenerationOutput.engine`` says which path ran and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn

from ..compat import cache_argument
from ..compiling import out_of_memory
from ..models import resolve_family
from ..press import TOKEN_LAYER
from .attention import decoding_attention, unsupported_attention
from .decode_state import DecodeState, state_shape
from .graphs import StepRunner
from .decode_attention import fused_kernels_run
from .kept_states import FUSED_ROOM, ROOM, KeptStates
from .prefill import COMPILED_LAYERS, Prefill, family_supports_static_decoding, run_prefill, under_press
from .prefill_layers import CompiledLayers
from .request import FALLBACK, GenerateRequest, GenerationObserver, GenerationOutput, batches_of, model_of, press_of
from .step import Sampling, Stopping, choose, decode_step, finish
from .stock import stock_generate
from .timing import ENGINE_CACHE, Clock, Timing, compile_counters, kv_cache_bytes

@dataclass
class _Prefilled:
    """The running values of one call's prefills, batch after batch: the decode state they fill and what
    decoding and the call's record need of them."""

    state: DecodeState | None = None  # None until a prefill is loaded, and with max_new_tokens=1
    stopping: Stopping | None = None  # made once the first prefill gives the vocabulary size
    firsts: list = field(default_factory=list)  # each loaded batch's first tokens
    outcomes: list = field(default_factory=list)  # each loaded batch's PressOutcome
    rows: int = 0  # rows loaded so far: where the next batch's rows go
    held_bytes: int = 0  # the keys and values the loaded prefills left
    first_end: object = None  # the clock's mark after the first prefill


@dataclass
class Generator:
    """Generation with kvprune's engine on one model (a ``LoadedModel`` is taken for its model); keeps
    compiled steps and decode states across calls.

    * ``compile``: compile the decode step with ``torch.compile`` ("auto": on CUDA).
    * ``cuda_graphs``: capture each decode state's step as a CUDA graph ("auto": on CUDA).
    * ``fast_linear``: the compiled step's linear layers on ``gemv``'s Triton kernels up to ``gemv.MAX_ROWS`` rows
      (projections of one input, or a gated MLP with its activation, in one launch); "auto": when compiling on CUDA.
    * ``fused_attention``: the decode step's attention as fused Triton kernels on CUDA (``decode_attention``); False:
      two matrix products and a softmax, as on the CPU.
    * ``per_octave``: length buckets per power of two (more: less padding, more shapes).
    * ``split_unpruned_at``: K of the token presses it will run (their default: ``TOKEN_LAYER``). An unpruned prompt's
      cache is laid out in two groups split there, as such a press lays out its own, so that one compiled step
      decodes both (each grouping of layers compiles on its own, about a minute on a GPU); None: one group.
    * ``max_state_bytes``: device memory decode states may keep between calls (least recently used go);
      "auto": on CUDA, 3/4 of the memory free when the generator is made (the model loaded), else 8 GiB.
      A call that runs out of memory while earlier calls' states are kept drops them and runs again once.
    * ``state_room``: a call decodes in a kept state of its grouping with up to this many times the room it needs
      (``kept_states``); "auto": 2 where the fused decode attention runs (a shorter prompt after a longer one makes
      no state or CUDA graph of its own, with the same bits), else 1 (its own shape only: same numbers).
    * ``compile_prefill``: the prefill's decoder layers from K (``split_unpruned_at``) on run compiled (``prefill_layers``:
      the host's launches bound them on small models); "auto": where the step compiles on CUDA (15-30 s once).
    * ``check_every``: tokens between reads of the stop flags (the only host synchronisation); before the first
      such read, the flags are also read after steps 1, 2, 4, 8, ... (``reads_stops_after``), so a short answer
      (a letter and its end) stops within twice its length instead of running on to step ``check_every``.
    """

    model: nn.Module
    compile: bool | str = "auto"
    cuda_graphs: bool | str = "auto"
    compile_mode: str | None = None
    fast_linear: bool | str = "auto"
    fused_attention: bool = True
    per_octave: int = 8
    split_unpruned_at: int | None = TOKEN_LAYER
    max_state_bytes: int | str = "auto"
    state_room: float | str = "auto"
    compile_prefill: bool | str = "auto"
    check_every: int = 16
    _runners: dict = field(default_factory=dict, init=False, repr=False)
    _made: int = field(default=0, init=False, repr=False)  # decode states allocated so far
    _stoppings: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.model = model_of(self.model)  # a LoadedModel: its model
        self.family = resolve_family(self.model)
        self.module = self.family.entry(self.model)  # the module whose forward returns logits
        self.config = self.family.decoder(self.model).config
        self.device = (weights := next(self.module.parameters())).device
        cuda = self.device.type == "cuda"
        self.compile = cuda if self.compile == "auto" else bool(self.compile)
        self.cuda_graphs = cuda if self.cuda_graphs == "auto" else bool(self.cuda_graphs)
        self.fast_linear, self.compile_prefill = ((cuda and self.compile) if option == "auto" else bool(option)
                                                  for option in (self.fast_linear, self.compile_prefill))
        if self.cuda_graphs and not cuda:
            raise ValueError("cuda_graphs=True needs the model on a CUDA device.")
        if self.max_state_bytes == "auto":
            self.max_state_bytes = int(0.75 * torch.cuda.mem_get_info(self.device)[0]) if cuda else 8 << 30
        if self.state_room == "auto":
            self.state_room = FUSED_ROOM if fused_kernels_run(self.device, self.fused_attention, weights.dtype) else ROOM
        self._kept = KeptStates(self.max_state_bytes, self.state_room)
        COMPILED_LAYERS.pop(self.module, None)  # the module's latest engine decides how its prefills run
        if self.compile_prefill:
            COMPILED_LAYERS[self.module] = CompiledLayers(self.family.layers(self.module), self.split_unpruned_at or TOKEN_LAYER)
        self.unsupported = family_supports_static_decoding(self.module) or unsupported_attention(self.config)

    # -- public ---------------------------------------------------------------------------------------
    def generate(
        self, inputs: dict | Sequence[dict], *, max_new_tokens: int, press=None, ratio: float | None = None,
        do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
        eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None,
        suppress_tokens: list[int] | None = None, observer: GenerationObserver | None = None,
        decode_rows: int | None = None,
    ) -> GenerationOutput:
        """Generate up to ``max_new_tokens`` per row under ``press`` at ``ratio`` (its own ratio if None;
        no press: unpruned; a registered press's name builds it). ``inputs`` is a batch of model inputs (as
        ``LoadedModel.build_inputs`` or a processor makes them, left-padded), or a list of such batches: each is prefilled on its own (so that one prefill's activations, not
        the whole batch's, bound the memory), then all rows decode together; a batch repeated as the
        same object (``[inputs] * 16``: sixteen answers to one prompt) is prefilled once. ``observer``: a
        ``GenerationObserver`` told where the call's prefills and decoding begin and end (instruments).
        ``decode_rows``: decode in a state of at least that many rows, the rows beyond the call's idle (ended from
        the start): a call with fewer rows than the calls around it (a sweep's last batch of a task) then decodes
        on their compiled step, and where lengths agree their state and CUDA graph, instead of compiling its own
        (a batch size is a compilation of its own); only where the step compiles or is captured. Greedy tokens
        are unchanged; sampled ones draw differently."""
        eos, pad = self._special_tokens(eos_token_id, pad_token_id)
        request = GenerateRequest(
            batches=tuple(batches_of(inputs)), press=press_of(press, ratio), max_new_tokens=max_new_tokens,
            sampling=Sampling(do_sample, temperature, top_k, top_p), eos=tuple(eos), pad=pad,
            suppress_tokens=tuple(suppress_tokens or ()), observer=observer or GenerationObserver(), decode_rows=decode_rows or 0,
        )
        if self.unsupported:
            return self._fallback(request)
        kept = bool(self._kept)
        try:
            return self._generate(request)
        except Exception as error:  # kept states give way to the work: once, then the error is the caller's
            if not (kept and out_of_memory(error)):
                raise
        self.forget_states()
        return self._generate(request)

    def tokens_generated(self, answer_tokens: int, max_new_tokens: int) -> int:
        """Tokens a call generates per row when its longest row's answer ends after ``answer_tokens`` (its
        end token included): decoding runs on to the next step after which the stop flags are read."""
        step = max(1, answer_tokens - 1)  # the first token comes from the prefill
        while not self.reads_stops_after(step):
            step += 1
        return min(max_new_tokens, 1 + step)

    def reads_stops_after(self, step: int) -> bool:
        """Whether decoding reads the stop flags after ``step`` (a host synchronisation): after steps 1, 2, 4,
        ... below ``check_every``, then every ``check_every`` steps. A short answer then costs at most twice
        its steps, a long one at most ``check_every`` - 1 more, with a handful of extra reads per call."""
        return step % self.check_every == 0 or (step < self.check_every and step & (step - 1) == 0)

    def forget_states(self) -> None:
        """Drop the kept decode states, their CUDA graphs and the graphs' memory pools (compiled steps stay):
        memory back to the allocator, e.g. before a batch that needs all of it."""
        self._kept.clear()
        for runner in self._runners.values():
            runner.release_pool()

    def _generate(self, request: GenerateRequest) -> GenerationOutput:
        graphs_before, (compiled_before, _) = self._captures(), compile_counters()
        made_before = self._made
        clock = Clock(self.device)
        start = clock.mark()
        prefilled = self._prefill(request, clock)
        prefill_end = clock.mark()
        at_prefill_end = self._made_so_far()
        loop_start, compiled, state, untimed = prefill_end, None, prefilled.state, (0, 0)
        if state is not None:
            new, loop_start, compiled, at_loop_start = self._decode(state, request, prefilled.stopping, clock)
            untimed = tuple(b - a for a, b in zip(at_prefill_end, at_loop_start))  # a new state's capture, untimed
        else:
            new = torch.cat(prefilled.firsts)[:, None]
        end = clock.mark()
        new = _trim(new, request.eos)
        graphs, compilations = self._captures() - graphs_before, compile_counters()[0] - compiled_before
        timing = Timing(
            prefill_s=clock.seconds(start, prefill_end), decode_s=clock.seconds(loop_start, end), new_tokens=new.shape[1],
            kv_cache_bytes=state.nbytes if state is not None else 0, kv_held_bytes=prefilled.held_bytes,
            cache=ENGINE_CACHE, compiled=compilations > 0 or graphs > 0,
        )
        return GenerationOutput(
            sequences=_joined([batch["input_ids"] for batch in request.batches], new, request.pad), new_tokens=new,
            timing=timing, outcome=_one_or_all(prefilled.outcomes), first_prefill_s=clock.seconds(start, prefilled.first_end),
            capture_s=clock.seconds(prefill_end, loop_start), graphs_captured=graphs, compilations=compilations,
            new_state=self._made > made_before, step_compiled=compiled,
            compiled_in_timing=graphs > untimed[0] or compilations > untimed[1],
        )

    def _prefill(self, request: GenerateRequest, clock: Clock) -> _Prefilled:
        """Every batch's prefill under the request's press, each loaded into the decode state (grown as
        needed) as soon as it is done, so that one batch's cache is held at a time beside the state."""
        prefilled = _Prefilled()
        # idle rows save a compilation or a capture only where the step compiles or replays (on a GPU they are
        # nearly free: a small batch's step reads the weights whatever its rows); elsewhere they would only cost
        rows = max(request.rows, request.decode_rows) if self.compile or self.cuda_graphs else request.rows
        longest = request.longest
        for batch, copies in request.prefills:
            prefill = run_prefill(self.module, batch, request.press, request.observer)
            request.observer.prefill_ended()
            for _ in range(copies):
                prefilled.first_end = prefilled.first_end or clock.mark()
                prefilled.stopping = prefilled.stopping or self._stopping(request, prefill.logits.shape[-1])
                first = choose(prefill.logits, request.sampling, prefilled.stopping)
                first, done = finish(first, torch.zeros_like(first, dtype=torch.bool), prefilled.stopping)
                if request.max_new_tokens > 1:
                    stretch = longest / batch["input_ids"].shape[1]
                    prefilled.state = self._state_for(prefilled.state, prefill, rows, request.max_new_tokens, prefilled.rows, stretch)
                    prefilled.state.load(prefill, prefilled.rows, first, done)
                prefilled.firsts.append(first)
                prefilled.outcomes.append(prefill.outcome)
                prefilled.held_bytes += kv_cache_bytes(prefill)
                prefilled.rows += prefill.batch
            del prefill  # its cache is in the decode state now: one batch's cache at a time
        if prefilled.state is not None:
            prefilled.state.idle(prefilled.rows)
        return prefilled

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
        return self._kept.nbytes

    @property
    def states(self) -> int:
        return len(self._kept)

    # -- decoding -------------------------------------------------------------------------------------
    def _state_for(self, state: DecodeState | None, prefill: Prefill, rows: int, max_new_tokens: int, offset: int,
                   stretch: float) -> DecodeState:
        """The decode state for ``rows`` rows that this prefill's rows fit: the one in use if it has room
        (a later prefilled batch may hold more entries), else a kept or new one of a larger bucket, with
        the rows loaded so far copied over. The first is sized for the longest prompt of the call
        (``stretch``: its length over this prefill's, the kept entries scaled alike), so that a call
        rarely grows through states (each a new allocation and graph capture)."""
        if state is None:
            first = self._state(state_shape(prefill, rows, max_new_tokens, self.per_octave, stretch,
                                            self.split_unpruned_at), prefill)
            first.reset()  # a kept state holds an earlier call's rows and step
            return first
        needed = state_shape(prefill, rows, max_new_tokens, self.per_octave, split_at=self.split_unpruned_at)
        if state.shape.fits(needed):
            return state
        needed = replace(needed, capacities=tuple(map(max, needed.capacities, state.shape.capacities)))  # per group
        grown = self._state(needed, prefill)
        grown.reset()
        grown.copy_rows_from(state, offset)
        return grown

    def _decode(self, state: DecodeState, request: GenerateRequest, stopping: Stopping,
                clock: Clock) -> tuple[torch.Tensor, object, bool, tuple[int, int]]:
        """The new tokens, the clock's mark where the token loop began (after a graph capture, if any),
        whether the step ran compiled, and ``_made_so_far()`` at that mark."""
        request.observer.decoding_started()
        try:
            runner = self._runner(request.sampling, stopping, state.shape.batch)
            with torch.no_grad(), decoding_attention(self.config):
                runner.prepare(state)
                at_loop_start = self._made_so_far()
                loop_start = clock.mark()
                for step in range(1, request.max_new_tokens):
                    runner.run(state)
                    if self.reads_stops_after(step) and bool(state.done.all()):
                        break
            return state.out[:request.rows, :request.max_new_tokens].clone(), loop_start, runner.compiled_for(state), at_loop_start
        finally:
            request.observer.decoding_ended()

    def _state(self, shape, template: Prefill) -> DecodeState:
        """A kept state that holds ``shape`` (``KeptStates.take``), or a new one."""
        state, made = self._kept.take(shape, lambda: DecodeState(shape, template))
        self._made += made
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

    def _made_so_far(self) -> tuple[int, int]:
        """(CUDA graphs captured, torch.compile graphs made) so far."""
        return self._captures(), compile_counters()[0]

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

    def _stopping(self, request: GenerateRequest, vocab: int) -> Stopping:
        """The stop tensors of the request's settings, made once per generator (each call would otherwise copy them in)."""
        key = (request.eos, request.pad, request.suppress_tokens, vocab)
        if key not in self._stoppings:
            self._stoppings[key] = Stopping.on_device(list(request.eos), request.pad, list(request.suppress_tokens), vocab,
                                                      self.device)
        return self._stoppings[key]

    def _fallback(self, request: GenerateRequest) -> GenerationOutput:
        """``model.generate`` (on its dynamic cache), batch by batch, for a model the engine cannot decode."""
        kwargs = dict(max_new_tokens=request.max_new_tokens, do_sample=request.sampling.do_sample, pad_token_id=request.pad,
                      eos_token_id=list(request.eos) or None, suppress_tokens=list(request.suppress_tokens) or None)
        if request.sampling.do_sample:
            sampling = request.sampling
            kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
        news, timings, outcomes = [], [], []
        for batch in request.batches:
            with torch.no_grad(), under_press(self.module, request.press, request.observer) as session:
                new, timing = stock_generate(self.module, batch, request.observer, **kwargs)
            news.append(new)
            timings.append(timing)
            outcomes.append(session.outcome if session is not None else None)
        width = max(new.shape[1] for new in news)
        new = torch.cat([torch.nn.functional.pad(n, (0, width - n.shape[1]), value=request.pad) for n in news])
        timing = Timing.of_calls(timings)
        return GenerationOutput(
            _joined([b["input_ids"] for b in request.batches], new, request.pad), new, timing, _one_or_all(outcomes),
            engine=FALLBACK, note=self.unsupported, first_prefill_s=timings[0].prefill_s,
            compiled_in_timing=timing.compiled,  # stock generate: every compilation inside its timed spans
        )


def generate(model, inputs, *, max_new_tokens: int, press=None, ratio: float | None = None, **kwargs) -> GenerationOutput:
    """One call of kvprune's generation engine on ``model`` (a module or a ``LoadedModel``; see
    ``Generator``, and keep one to reuse its compiled steps and graphs across calls)."""
    return Generator(model).generate(inputs, max_new_tokens=max_new_tokens, press=press, ratio=ratio, **kwargs)


def _one_or_all(outcomes: list):
    """A call's press outcome: the one batch's, or each batch's in order."""
    return outcomes[0] if len(outcomes) == 1 else outcomes


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
