"""The requests a bench mode times at one audio length (``plan``), and one request run on a model
(``run_request``): the press, the ideal's kept prefix and the encoder path around one timed call."""

from __future__ import annotations

from contextlib import ExitStack

from kvprune import fast_audio_encoder
from kvprune.keep_rules import keep_count

from ..setup.device import release_memory
from ..setup.options import ENGINE_CACHE
from .config import BenchConfig
from .ideal import kept_prefix
from .measure import Probes
from .presets import Prompt
from .rounds import Request
from .state import BenchState


def plan(config: BenchConfig, prompt: Prompt, cache: str) -> list[Request]:
    """The requests of the configured mode at one audio length, in the order of the first round."""
    encoder = config.encoder
    drop = {label_ratio: _drop_ratio(press) for label_ratio, press in config.presses.items()}

    def pressed(**fixed) -> list[Request]:
        return [Request(label, ratio, press.kind, press, drop_ratio=drop[label, ratio], encoder=encoder, **fixed)
                for (label, ratio), press in config.presses.items()]

    def ideals() -> list[Request]:
        """Prefills on the dynamic cache (whatever a static cache changes in a prefill, the bound is not above
        it), made as the presses' prefills are: the engine's prefill call where they run on the engine."""
        ratios = sorted({r for r in drop.values() if r is not None})
        kept = {r: prompt.seq_len - prompt.audio_tokens + keep_count(prompt.audio_tokens, r) for r in ratios}
        path = ENGINE_CACHE if cache == ENGINE_CACHE else "dynamic"
        return [Request("ideal", r, "ideal", keep=kept[r], drop_ratio=r, encoder=encoder, cache=path) for r in ratios]

    if config.mode == "batch":
        return [request for b in config.batch_sizes
                for request in [Request("none", 0.0, "none", cache=cache, encoder=encoder, batch=b), *pressed(cache=cache, batch=b)]]
    if config.mode == "compare":
        stock = [Request("stock", 0.0, "stock", cache=kind, encoder="stock", generate=True) for kind in ("dynamic", "static")]
        ours = dict(cache=cache, generate=cache != ENGINE_CACHE)  # the engine is one whole call too
        unpruned = Request("none", 0.0, "none", encoder=encoder, **ours)
        return [*stock, unpruned, *pressed(**ours), *ideals()]
    return [Request("none", 0.0, "none", cache=cache, encoder=encoder), *ideals(), *pressed(cache=cache)]


def _drop_ratio(press) -> float | None:
    """The ratio at which a press drops tokens before layer K (None: it drops none)."""
    return next((part.ratio for part in press.parts() if part.kind == "token"), None)


def run_request(state: BenchState, model, prompt: Prompt, request: Request):
    """One timed request; returns its timing and the audio tokens its layers >= K kept (row 0). On the
    engine (``--decoding engine``, the default) ``prompt`` is the one-row prompt every row of the batch holds."""
    meter, k = state.meter, state.config.k
    if request.cache == ENGINE_CACHE and request.keep is None:
        with ExitStack() as stack:
            if request.encoder == "fast":
                stack.enter_context(fast_audio_encoder(model))
            probes = Probes(meter.clock, model, k)
            try:
                timing, outcome = meter.engine_request(state.engine(model), prompt, probes, request.press, request.batch)
            finally:
                probes.close()
        kept = outcome.stats[0].kept_tokens if outcome is not None else prompt.audio_tokens
        return timing, kept
    with ExitStack() as stack:
        if request.encoder == "fast":
            stack.enter_context(fast_audio_encoder(model))
        pressed = stack.enter_context(request.press(model)) if request.press is not None else None
        if request.keep is not None:
            stack.enter_context(kept_prefix(model, k, request.keep))
        probes = Probes(meter.clock, model, k, request.press)
        try:
            if request.generate:
                timing = meter.generate_request(model, prompt, probes, request.cache)
            else:  # on the engine cache: the ideal beside presses on the engine, its prefill call alone
                timing = meter.request(model, prompt, probes, request.cache, decode=request.decodes)
        finally:
            probes.close()
    if pressed is not None:
        return timing, pressed.stats[0].kept_tokens
    if request.drop_ratio is not None:
        return timing, keep_count(prompt.audio_tokens, request.drop_ratio)
    return timing, prompt.audio_tokens


def describe_request(request: Request, state: BenchState, fast_path: bool) -> dict:
    """A request's row fields that say what ran."""
    return dict(
        method=request.method,
        kind=request.kind,
        ratio=request.ratio,
        drop_ratio=request.drop_ratio,
        layer=request.press.layer if request.press is not None else state.config.k,
        batch=request.batch,
        encoder="fast" if request.encoder == "fast" and fast_path else "stock",
        path=_path(request),
        decode_compiled=request.decodes and state.meter.compiles(request.cache, request.generate),
        prefill_compiled=request.cache == ENGINE_CACHE and state.prefill_compiled(),
    )


def _path(request: Request) -> str:
    """What ran: the engine (a whole call), the engine's prefill call alone (the ideal beside presses on the
    engine), a ``generate`` call, or the model's forward."""
    if request.cache == ENGINE_CACHE:
        return ENGINE_CACHE if request.keep is None else "engine prefill"
    return "generate" if request.generate else "forward"


def describe(error: Exception) -> str:
    """An error as a row records it: its type and first line."""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]


def failed(error: Exception) -> str:
    """A request's error, once its memory is released (e.g. after running out of it)."""
    release_memory()
    return describe(error)
