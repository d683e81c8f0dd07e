"""The work of ``kvprune bench`` (see ``bench.config``): build each preset, plan the requests of its
mode at each audio length, time them in interleaved rounds (``bench.rounds``), record failures as
rows, write the report after every preset."""

from __future__ import annotations

import gc
import math
import platform
import sys
import time
from contextlib import ExitStack, contextmanager, nullcontext
from datetime import datetime, timezone

import pandas as pd
import torch
import transformers
from tqdm.auto import tqdm

import kvprune
from kvprune import fast_audio_encoder, resolve_family
from kvprune.ratios import keep_count

from ..options import check_presses, resolve_cache
from . import batch as batching
from .config import BenchConfig
from .ideal import kept_prefix
from .measure import Meter, Probes, takes_logits_to_keep
from .memory import check_fits
from .presets import PRESETS, Preset, Prompt, check_weights
from .report import bench_frame, write_report
from .rounds import GIB, SKIPPED, Request, disturbed, run_rounds, summary
from .scoring import ScoringInputs, eager_matrix_cost, last_row_ms

RECOMPILE_LIMIT = 64  # compiled decode steps per code object: one per cache shape (lengths x ratios x batch sizes)


class _Run:
    """State of one bench run: device, meter, deadline, progress bar and the rows so far."""

    def __init__(self, config: BenchConfig):
        self.config = config
        self.device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        auto = "bfloat16" if self.device.type == "cuda" else "float32"
        self.dtype = getattr(torch, auto if config.dtype == "auto" else config.dtype)
        self.meter = Meter(self.device, config.warmup, config.repeats, config.compile, config.compile_config)
        self.cache = resolve_cache(config.cache, self.device)
        self.deadline = math.inf if config.max_minutes is None else time.monotonic() + 60 * config.max_minutes
        # shown once work has started (a run refused up front draws nothing); one count per audio length
        self.bar = tqdm(total=0, disable=not config.progress, unit="request", dynamic_ncols=True, delay=1)
        self.rows: list[dict] = []

    def expired(self) -> bool:
        return time.monotonic() > self.deadline


def run_presets(config: BenchConfig) -> pd.DataFrame:
    """Every preset x audio length in the configured mode; one row per request."""
    for name in config.presets:
        _check_methods(config, PRESETS.get(name))
    run = _Run(config)
    meta = _environment(config, run)
    try:
        check_fits(config, run.device, run.dtype)
        with _recompile_room():
            for name in config.presets:
                _bench_preset(run, PRESETS.get(name))
                if config.out is not None:
                    write_report(bench_frame(run.rows, meta), config.out)
    finally:
        run.bar.close()
    return bench_frame(run.rows, meta)


def _check_methods(config: BenchConfig, preset: Preset) -> None:
    """Every method at every ratio against the preset's skeleton (its modules on the meta device: no
    memory, no weights), so that a bad layer stops the bench before its first request, not as one
    error row per request. A preset that cannot be built so is checked by its build (an error row)."""
    try:
        skeleton = preset.build(torch.device("meta"), torch.float32, config.attn_implementation)
    except Exception:
        return
    check_presses(skeleton, preset.name, config.presses)


def _bench_preset(run: _Run, preset: Preset) -> None:
    config = run.config
    base = dict(preset=preset.name)
    model, failure = (None, SKIPPED) if run.expired() else _build(run, preset)
    if model is None:
        _free_memory()
        for seconds in config.audio_seconds:
            run.rows.append(dict(base, audio_seconds=seconds, method="none", kind="none", ratio=0.0, error=failure))
        return
    family = resolve_family(model)
    base.update(family=family.name, llm_layers=len(family.layers(model)))
    with fast_audio_encoder(model) as fast:
        fast_path = bool(fast.changes)  # whether kvprune's encoder differs from the stock one on this model
    try:
        for seconds in config.audio_seconds:
            try:
                _bench_length(run, model, preset, dict(base, audio_seconds=seconds), fast_path)
            except Exception as error:  # e.g. a batch's inputs do not fit: the next length still runs
                run.rows.append(dict(base, audio_seconds=seconds, method="none", kind="none", ratio=0.0,
                                     error=f"audio length: {_failed(error)}"))
    finally:
        del model
        _free_memory()
        _forget_compiled()


def _build(run: _Run, preset: Preset):
    """The preset's model with checked random weights, or None and why not (e.g. it does not fit)."""
    try:
        model = preset.build(run.device, run.dtype, run.config.attn_implementation, run.config.seed)
        check_weights(model)
        return model, None
    except Exception as error:
        return None, f"build: {_describe(error)}"


# -- one audio length -----------------------------------------------------------------------------
def _bench_length(run: _Run, model, preset: Preset, base: dict, fast_path: bool) -> None:
    config = run.config
    prompt = preset.prompt(model, base["audio_seconds"], config.decode_tokens, config.seed)
    base.update(audio_tokens=prompt.audio_tokens, seq_len=prompt.seq_len)
    requests = plan(config, prompt, run.cache)
    prompts = {b: prompt if b == 1 else preset.prompt(model, base["audio_seconds"], config.decode_tokens, config.seed, b)
               for b in sorted({r.batch for r in requests})}
    rounds = run.meter.warmup + run.meter.repeats
    run.bar.reset(total=len(requests) * rounds)

    def run_one(request: Request):
        run.bar.update(1)
        return _request(run, model, prompts[request.batch], request)

    def on_round(index: int) -> None:
        run.bar.set_description(f"{base['preset']} {base['audio_seconds']:g}s round {index + 1}/{rounds}")

    outcomes = run_rounds(requests, rounds, run.meter.warmup, run_one, run.expired, _failed, on_round)
    dropped = disturbed(outcomes)
    rows = [dict(base, **_describe_request(request, run, fast_path), **summary(outcomes[request], dropped[request]))
            for request in requests]
    if config.mode == "ratios" and config.k is not None and "error" not in rows[0]:
        rows[0].update(_scoring_costs(run, model, prompt))
    if config.mode == "compare":
        identical = _encoder_identical(run, model, prompt) if fast_path else True
        for row in rows:
            if row["method"] != "stock":
                row["encoder_identical"] = identical
    if config.largest_batch:
        _largest_batches(run, model, preset, base, requests, outcomes, prompts, rows)
    run.rows.extend(rows)


def plan(config: BenchConfig, prompt: Prompt, cache: str) -> list[Request]:
    """The requests of the configured mode at one audio length, in the order of the first round."""
    encoder = config.encoder
    drop = {label_ratio: _drop_ratio(press) for label_ratio, press in config.presses.items()}

    def pressed(**fixed) -> list[Request]:
        return [Request(label, ratio, press.kind, press, drop_ratio=drop[label, ratio], encoder=encoder, **fixed)
                for (label, ratio), press in config.presses.items()]

    def ideals() -> list[Request]:
        """Prefills on the dynamic cache: whatever a static cache changes in a prefill, the bound is not above it."""
        ratios = sorted({r for r in drop.values() if r is not None})
        kept = {r: prompt.seq_len - prompt.audio_tokens + keep_count(prompt.audio_tokens, r) for r in ratios}
        return [Request("ideal", r, "ideal", keep=kept[r], drop_ratio=r, encoder=encoder) for r in ratios]

    if config.mode == "batch":
        return [request for b in config.batch_sizes
                for request in [Request("none", 0.0, "none", cache=cache, encoder=encoder, batch=b), *pressed(cache=cache, batch=b)]]
    if config.mode == "compare":
        stock = [Request("stock", 0.0, "stock", cache=kind, encoder="stock", generate=True) for kind in ("dynamic", "static")]
        unpruned = Request("none", 0.0, "none", cache="static", encoder=encoder, generate=True)
        return [*stock, unpruned, *pressed(cache="static", generate=True), *ideals()]
    return [Request("none", 0.0, "none", cache=cache, encoder=encoder), *ideals(), *pressed(cache=cache)]


def _drop_ratio(press) -> float | None:
    """The ratio at which a press drops tokens before layer K (None: it drops none)."""
    return next((part.ratio for part in press.parts() if part.kind == "token"), None)


def _request(run: _Run, model, prompt: Prompt, request: Request):
    """One timed request; returns its timing and the audio tokens its layers >= K kept (row 0)."""
    meter, k = run.meter, run.config.k
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
            else:
                timing = meter.request(model, prompt, probes, request.cache, decode=request.decodes)
        finally:
            probes.close()
    if pressed is not None:
        return timing, pressed.stats[0].kept_tokens
    if request.drop_ratio is not None:
        return timing, keep_count(prompt.audio_tokens, request.drop_ratio)
    return timing, prompt.audio_tokens


def _describe_request(request: Request, run: _Run, fast_path: bool) -> dict:
    return dict(
        method=request.method,
        kind=request.kind,
        ratio=request.ratio,
        drop_ratio=request.drop_ratio,
        layer=request.press.layer if request.press is not None else run.config.k,
        batch=request.batch,
        encoder="fast" if request.encoder == "fast" and fast_path else "stock",
        path="generate" if request.generate else "forward",
        decode_compiled=request.decodes and run.meter.compiles(request.cache, request.generate),
    )


# -- extras ---------------------------------------------------------------------------------------
def _scoring_costs(run: _Run, model, prompt: Prompt) -> dict:
    """AudioMarathon's eager attention matrix against kvprune's last-row scores, at layer K-1. If
    they fail (e.g. the matrix does not fit), the unpruned row still counts, with the error."""
    if run.expired():
        return {}
    try:
        scoring = ScoringInputs.for_model(model, run.config.k, prompt.inputs["input_ids"], run.config.seed)
        eager = eager_matrix_cost(run.meter, model, run.config.k, scoring)
        return dict(
            eager_score_ms=eager.extra_ms,
            eager_score_extra_gib=eager.extra_bytes / GIB,
            last_row_score_ms=last_row_ms(run.meter, scoring),
        )
    except Exception as error:
        return {"error": f"scoring costs: {_failed(error)}"}


@torch.no_grad()
def _encoder_identical(run: _Run, model, prompt: Prompt) -> bool | None:
    """Whether kvprune's audio encoder gives exactly the stock encoder's output on this prompt (None:
    not checked, for lack of time or because the check failed)."""
    if run.expired():
        return None
    try:
        return _same_encoder_output(model, prompt)
    except Exception:
        _free_memory()
        return None


def _same_encoder_output(model, prompt: Prompt) -> bool:
    end = resolve_family(model).audio_encoder(model)[1]
    outputs = []
    handle = end.register_forward_hook(
        lambda module, args, output: outputs.append(output if isinstance(output, torch.Tensor) else output[0])
    )
    try:
        for fast in (False, True):
            with fast_audio_encoder(model) if fast else nullcontext():
                model(**prompt.inputs, use_cache=False, **({"logits_to_keep": 1} if takes_logits_to_keep(model) else {}))
    finally:
        handle.remove()
    return torch.equal(outputs[0], outputs[1])


def _largest_batches(run: _Run, model, preset: Preset, base: dict, requests, outcomes, prompts, rows) -> None:
    """Per configuration, the largest batch that fits (CUDA only): predicted from the measured
    batches, then run (see ``bench.batch``)."""
    if not run.meter.cuda:
        for row in rows:
            row.update(max_batch_predicted=math.nan, max_batch=math.nan)
        return
    configurations: dict[tuple, dict[int, object]] = {}
    for request in requests:
        outcome = outcomes[request]
        if outcome.samples:
            key = (request.method, request.ratio)
            configurations.setdefault(key, {})[request.batch] = max(outcome.samples, key=lambda s: s.peak_bytes - s.base_bytes)
    found = {}
    for (method, ratio), samples in configurations.items():
        request = next(r for r in requests if (r.method, r.ratio) == (method, ratio))
        per_row = batching.row_bytes(samples, {b: prompts[b].input_bytes for b in samples})
        fixed = min(s.base_bytes - prompts[b].input_bytes for b, s in samples.items())
        predicted = batching.predicted_batch(per_row, fixed, batching.allocatable_bytes(run.device))

        def fits(size: int, request=request) -> bool:
            if run.expired():
                return False
            try:
                prompt = preset.prompt(model, base["audio_seconds"], 1, run.config.seed, size)
                _request(run, model, prompt, request)
                return True
            except torch.OutOfMemoryError:
                _free_memory()
                return False

        try:
            found[method, ratio] = (predicted, batching.largest_fitting(predicted, fits))
        except Exception as error:  # not a lack of memory: the search stops, the rows stay
            found[method, ratio] = (predicted, math.nan)
            for row in rows:
                if (row["method"], row["ratio"]) == (method, ratio) and row.get("error") is None:
                    row["error"] = f"largest batch: {_describe(error)}"
        _free_memory()
    for row in rows:
        predicted, largest = found.get((row["method"], row["ratio"]), (math.nan, math.nan))
        row.update(max_batch_predicted=predicted, max_batch=largest)


# -- helpers --------------------------------------------------------------------------------------
def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]


def _failed(error: Exception) -> str:
    """A request's error, once its memory is released (e.g. after running out of it)."""
    _free_memory()
    return _describe(error)


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _forget_compiled() -> None:
    """Drop the compiled decode steps of a model that is gone (they hold its graphs and memory)."""
    if "torch._dynamo" in sys.modules:
        torch._dynamo.reset()


@contextmanager
def _recompile_room():
    """Room for one compiled decode step per cache shape in a run (torch's default of 8 recompilations
    per function would fall back to uncompiled code without a word after the 8th shape)."""
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # its older name
    with config.patch(**{name: max(RECOMPILE_LIMIT, getattr(config, name))}):
        yield


def _environment(config: BenchConfig, run: _Run) -> dict:
    card = torch.cuda.get_device_name(run.device) if run.device.type == "cuda" else platform.processor() or "cpu"
    return dict(
        mode=config.mode,
        card=card,
        device=str(run.device),
        dtype=str(run.dtype).removeprefix("torch."),
        attn=config.attn_implementation,
        repeats=config.repeats,
        warmup=config.warmup,
        decode_tokens=config.decode_tokens,
        torch=torch.__version__,
        transformers=transformers.__version__,
        kvprune=kvprune.__version__,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=config.command,
    )
