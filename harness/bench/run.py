"""The work of ``kvprune bench`` (see ``bench.config``): build each preset, measure every
run, record failures as rows, write the report after every preset."""

from __future__ import annotations

import gc
import math
import statistics
import platform
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timezone

import pandas as pd
import torch
import transformers
from tqdm.auto import tqdm

import kvprune
from kvprune import fast_audio_encoder, resolve_family
from kvprune.ratios import keep_count

from .config import BenchConfig
from .measure import Meter, RequestTiming, layers_run, logits_rows, median_timing
from .memory import check_fits
from .presets import PRESETS, Preset, Prompt, check_weights
from .report import GIB, IDEAL, UNPRUNED, bench_frame, write_report
from .scoring import ScoringInputs, eager_matrix_cost, last_row_ms, press_scoring_ms


class _Run:
    """State of one bench run: device, meter, deadline, progress bar and the rows so far."""

    def __init__(self, config: BenchConfig):
        self.config = config
        self.device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        auto = "bfloat16" if self.device.type == "cuda" else "float32"
        self.dtype = getattr(torch, auto if config.dtype == "auto" else config.dtype)
        self.meter = Meter(self.device, config.warmup, config.repeats)
        self.deadline = math.inf if config.max_minutes is None else time.monotonic() + 60 * config.max_minutes
        runs_per_length = 2 + len(config.methods) * len(config.ratios)  # unpruned, ideal, presses
        self.bar = tqdm(
            total=len(config.presets) * len(config.audio_seconds) * runs_per_length,
            disable=not config.progress,
            unit="run",
            dynamic_ncols=True,
        )
        self.rows: list[dict] = []

    def measure(self, base: dict, method: str, ratios: list[float], fn: Callable[[], list[dict]]) -> list[dict]:
        """One run, one progress step: a row per ratio with ``base`` fields and what ``fn`` measured
        for that ratio, or the error that stopped it."""
        self.bar.set_description(f"{base['preset']} {base['audio_seconds']:g}s {method}")
        if time.monotonic() > self.deadline:
            measured = [{"error": "skipped: --max-minutes reached"}] * len(ratios)
        else:
            measured = _attempt(fn, len(ratios))
        rows = [
            dict(base, method=method, ratio=ratio, **values) for ratio, values in zip(ratios, measured, strict=True)
        ]
        self.rows.extend(rows)
        self.bar.update(1)
        return rows


def run_presets(config: BenchConfig) -> pd.DataFrame:
    """Every preset x audio length x (unpruned, ideal, press x ratio); one row each."""
    run = _Run(config)
    meta = _environment(config, run)
    try:
        check_fits(config, run.device, run.dtype)
        for name in config.presets:
            _bench_preset(run, PRESETS.get(name))
            if config.out is not None:
                write_report(bench_frame(run.rows, meta), config.out)
    finally:
        run.bar.close()
    return bench_frame(run.rows, meta)


def _bench_preset(run: _Run, preset: Preset) -> None:
    config = run.config
    base = dict(preset=preset.name, layer=config.k)
    model, failure = _build(run, preset)
    if model is None:
        _free_memory()
        for seconds in config.audio_seconds:
            run.measure(dict(base, audio_seconds=seconds), UNPRUNED, [0.0], lambda: [{"error": failure}])
            run.bar.update(1 + len(config.methods) * len(config.ratios))
        return
    family = resolve_family(model)
    base.update(family=family.name, llm_layers=len(family.layers(model)))
    try:
        with fast_audio_encoder(model) if config.encoder == "fast" else nullcontext() as fast:
            base.update(encoder="fast" if fast is not None and fast.changes else "stock")
            for seconds in config.audio_seconds:
                _bench_length(run, model, preset, dict(base, audio_seconds=seconds))
    finally:
        del model
        _free_memory()


def _build(run: _Run, preset: Preset):
    """The preset's model with checked random weights, or None and why not (e.g. it does not fit)."""
    try:
        model = preset.build(run.device, run.dtype, run.config.attn_implementation, run.config.seed)
        check_weights(model)
        return model, None
    except Exception as error:
        return None, f"build: {_describe(error)}"


def _bench_length(run: _Run, model, preset: Preset, base: dict) -> None:
    config, meter = run.config, run.meter
    prompt = preset.prompt(model, base["audio_seconds"], config.decode_tokens, config.seed)
    base.update(audio_tokens=prompt.audio_tokens, seq_len=prompt.seq_len)
    encoder = preset.family.audio_encoder(model)
    k, n_layers = config.k, base["llm_layers"]
    requests = [(UNPRUNED, 0.0), *config.presses]
    # layers >= K (and the LM head) alone, on the full prompt and on each kept length: the ideal's parts,
    # timed in the same rounds as the requests so that drift cannot open a gap between them
    lengths = {ratio: prompt.seq_len - prompt.audio_tokens + keep_count(prompt.audio_tokens, ratio) for ratio in config.ratios}
    tails = {length: layers_run(model, k, n_layers, length, logits_rows(model, length))
             for length in {prompt.seq_len, *lengths.values()}}
    measured, tail_ms = _interleaved(run, model, prompt, encoder, requests, tails, base)

    def unpruned() -> list[dict]:
        if "error" in measured[UNPRUNED, 0.0]:
            raise RuntimeError(measured[UNPRUNED, 0.0]["error"])
        return [dict(
            measured[UNPRUNED, 0.0],
            tail_layers_ms=tail_ms[prompt.seq_len],
            head_layers_ms=meter.layers_ms(model, 0, k, prompt.seq_len, 0),
            **_scoring_costs(run, model, prompt),
        )]

    reference = run.measure(base, UNPRUNED, [0.0], unpruned)[0]

    def ideal() -> list[dict]:
        if "prefill_ms" not in reference:
            raise RuntimeError("no unpruned measurement to start from")
        return [
            dict(
                kept_tokens=keep_count(prompt.audio_tokens, ratio),
                encoder_ms=reference["encoder_ms"],
                head_layers_ms=reference["head_layers_ms"],
                tail_layers_ms=tail_ms[lengths[ratio]],
                prefill_ms=reference["prefill_ms"] - tail_ms[prompt.seq_len] + tail_ms[lengths[ratio]],
            )
            for ratio in config.ratios
        ]

    run.measure(base, IDEAL, config.ratios, ideal)
    scoring = ScoringInputs.for_model(model, k, prompt.inputs["input_ids"], config.seed)
    for method, ratio in requests[1:]:
        def pressed(method=method, ratio=ratio) -> list[dict]:
            if "error" in measured[method, ratio]:
                raise RuntimeError(measured[method, ratio]["error"])
            press = config.presses[method, ratio]
            return [dict(measured[method, ratio], score_ms=press_scoring_ms(meter, press, scoring))]

        run.measure(base, method, [ratio], pressed)


def _interleaved(run: _Run, model, prompt: Prompt, encoder, requests: list[tuple[str, float]], probes: dict, base: dict):
    """Every request (unpruned, press x ratio) and every probe (a callable) timed in rounds, each
    round running each once, starting one place later each round. Slow drift (clocks, host load)
    then spreads over all of them instead of biasing whichever ran in a bad minute. Returns the
    median timings per request (or its error) and the median milliseconds per probe."""
    samples: dict[tuple[str, float], list] = {request: [] for request in requests}
    probe_ms: dict = {key: [] for key in probes}
    failed: dict[tuple[str, float], str] = {}
    rounds = run.meter.warmup + run.meter.repeats
    work = [("request", request) for request in requests] + [("probe", key) for key in probes]
    for round_ in range(rounds):
        shift = round_ % len(work)
        run.bar.set_description(f"{base['preset']} {base['audio_seconds']:g}s round {round_ + 1}/{rounds}")
        for kind, key in work[shift:] + work[:shift]:
            if kind == "probe":
                ms = run.meter.once_ms(probes[key])
                if round_ >= run.meter.warmup:
                    probe_ms[key].append(ms)
                continue
            if key in failed:
                continue
            if time.monotonic() > run.deadline:
                failed[key] = "skipped: --max-minutes reached"
                continue
            try:
                timing, kept = _request(run, model, prompt, encoder, *key)
            except Exception as error:
                failed[key] = _describe(error)
                _free_memory()
                continue
            if round_ >= run.meter.warmup:
                samples[key].append((timing, kept))
    results = {}
    for request, runs in samples.items():
        if request in failed or not runs:
            results[request] = {"error": failed.get(request, "no timed run")}
        else:
            results[request] = dict(_timing_fields(median_timing([t for t, _ in runs])), kept_tokens=runs[0][1])
    return results, {key: statistics.median(values) if values else math.nan for key, values in probe_ms.items()}


def _request(run: _Run, model, prompt: Prompt, encoder, method: str, ratio: float):
    """One timed request, unpruned or under a press; returns its timing and the audio tokens kept."""
    if method == UNPRUNED:
        return run.meter.request(model, prompt, encoder), prompt.audio_tokens
    with run.config.presses[method, ratio](model) as pressed:
        timing = run.meter.request(model, prompt, encoder)
    return timing, pressed.stats[0].kept_tokens


def _scoring_costs(run: _Run, model, prompt: Prompt) -> dict:
    """AudioMarathon's eager attention matrix against kvprune's last-row scores, at layer K-1. If
    they fail (e.g. the matrix does not fit), the unpruned row still counts, with the error."""

    def measure() -> list[dict]:
        scoring = ScoringInputs.for_model(model, run.config.k, prompt.inputs["input_ids"], run.config.seed)
        eager = eager_matrix_cost(run.meter, model, run.config.k, scoring)
        return [
            dict(
                eager_score_ms=eager.extra_ms,
                eager_score_extra_gib=eager.extra_bytes / GIB,
                last_row_score_ms=last_row_ms(run.meter, scoring),
            )
        ]

    costs = _attempt(measure, 1)[0]
    if "error" in costs:
        costs["error"] = f"scoring costs: {costs['error']}"
    return costs


def _attempt(fn: Callable[[], list[dict]], n_rows: int) -> list[dict]:
    """``fn()``, or ``n_rows`` rows holding the error it raised; a failure (e.g. out of memory) is
    recorded and the bench goes on."""
    try:
        return fn()
    except Exception as error:
        failure = _describe(error)
    _free_memory()  # only here, past the except block, are the failed run's tensors released
    return [{"error": failure}] * n_rows


def _timing_fields(timing: RequestTiming) -> dict:
    return dict(
        prefill_ms=timing.prefill_ms,
        encoder_ms=timing.encoder_ms,
        decode_ms_per_token=timing.decode_ms_per_token,
        peak_gib=timing.peak_bytes / GIB,
        kv_bytes=timing.kv_bytes,
    )


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _environment(config: BenchConfig, run: _Run) -> dict:
    card = torch.cuda.get_device_name(run.device) if run.device.type == "cuda" else platform.processor() or "cpu"
    return dict(
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
