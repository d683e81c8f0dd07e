"""The work of ``kvprune bench`` (see ``bench.config``): check every method against each preset's
skeleton, build each preset, plan the requests of its mode at each audio length (``bench.requests``),
time them in interleaved rounds (``bench.rounds``), add the mode's extras (``bench.extras``), record
failures as rows, and write the report after every preset."""

from __future__ import annotations

import math
import sys

import pandas as pd
import torch

from kvprune import fast_audio_encoder, resolve_family
from kvprune.compiling import recompile_room

from ..setup.device import release_memory
from ..setup.environment import environment
from ..setup.options import ENGINE_CACHE
from ..setup.methods import check_methods
from .config import BenchConfig
from .extras import decode_step, encoder_agreement, encoder_flops, largest_batches, scoring_costs
from .memory import check_fits
from .presets import PRESETS, Preset, check_weights
from .report import bench_frame, write_report
from .requests import describe, describe_request, failed, plan, run_request
from .roofline import copy_tb_s, gemm_tflops
from .rounds import SKIPPED, Request, disturbed, over_ideal_by_round, round_rows, run_rounds, summary
from .state import BenchState



def run_bench(config: BenchConfig) -> pd.DataFrame:
    """Run every preset x audio length in the configured mode: a ``pandas.DataFrame`` with one row
    per request, also written to ``config.out`` after every preset (unless it is None)."""
    for name in config.presets:
        preset = PRESETS.get(name)
        # a preset that cannot be built on the meta device is checked by its build (an error row)
        check_methods(preset.name, lambda: preset.build(torch.device("meta"), torch.float32, config.attn_implementation),
                      {f"{label} (ratio {ratio:g})": press for (label, ratio), press in config.presses.items()})
    state = BenchState(config)
    meta = _run_record(state)
    try:
        check_fits(config, state.device, state.dtype, state.cache)
        meta["gemm_tflops"] = _rate(gemm_tflops, state, state.dtype)
        meta["copy_tb_s"] = _rate(copy_tb_s, state)
        with recompile_room():  # one compiled decode step per cache shape of stock generate's static-cache compile
            for name in config.presets:
                _bench_preset(state, PRESETS.get(name))
                if config.out is not None:
                    write_report(bench_frame(state.rows, meta), config.out, pd.DataFrame(state.rounds))
    finally:
        state.bar.close()
    return bench_frame(state.rows, meta)


def _bench_preset(state: BenchState, preset: Preset) -> None:
    config = state.config
    base = dict(preset=preset.name)
    model, failure = (None, SKIPPED) if state.expired() else _build(state, preset)
    if model is None:
        release_memory()
        for seconds in config.audio_seconds:
            state.rows.append(dict(base, audio_seconds=seconds, method="none", kind="none", ratio=0.0, error=failure))
        return
    family = resolve_family(model)
    base.update(family=family.name, llm_layers=len(family.layers(model)))
    with fast_audio_encoder(model) as fast:
        fast_path = bool(fast.changes)  # whether kvprune's encoder differs from the stock one on this model
    try:
        for seconds in config.audio_seconds:
            try:
                _bench_length(state, model, preset, dict(base, audio_seconds=seconds), fast_path)
            except Exception as error:  # e.g. a batch's inputs do not fit: the next length still runs
                state.rows.append(dict(base, audio_seconds=seconds, method="none", kind="none", ratio=0.0,
                                       error=f"audio length: {failed(error)}"))
    finally:
        del model
        state.forget_engines()
        release_memory()
        _forget_compiled()


def _build(state: BenchState, preset: Preset):
    """The preset's model with checked random weights, or None and why not (e.g. it does not fit)."""
    try:
        model = preset.build(state.device, state.dtype, state.config.attn_implementation, state.config.seed)
        check_weights(model)
        return model, None
    except Exception as error:
        return None, f"build: {describe(error)}"


def _bench_length(state: BenchState, model, preset: Preset, base: dict, fast_path: bool) -> None:
    """Every request of the mode at one audio length, timed in interleaved rounds, with the mode's extras."""
    config = state.config
    prompt = preset.prompt(model, base["audio_seconds"], config.decode_tokens, config.seed)
    base.update(audio_tokens=prompt.audio_tokens, seq_len=prompt.seq_len)
    requests = plan(config, prompt, state.cache)
    # the engine takes one row's prompt for every row of a batch; other paths the batch's own
    batches = {r.batch for r in requests if r.cache != ENGINE_CACHE} | {1}
    prompts = {b: prompt if b == 1 else preset.prompt(model, base["audio_seconds"], config.decode_tokens, config.seed, b)
               for b in sorted(batches)}
    rounds = state.meter.warmup + state.meter.repeats
    state.bar.reset(total=len(requests) * rounds)

    def run_one(request: Request):
        state.bar.update(1)
        return run_request(state, model, prompts[1 if request.cache == ENGINE_CACHE else request.batch], request)

    def on_round(index: int) -> None:
        state.bar.set_description(f"{base['preset']} {base['audio_seconds']:g}s round {index + 1}/{rounds}")

    outcomes = run_rounds(requests, rounds, state.meter.warmup, run_one=run_one, expired=state.expired, describe=failed,
                          on_round=on_round)
    dropped = disturbed(outcomes)
    state.rounds += [dict(base, **row) for row in round_rows(requests, outcomes, dropped, state.meter.warmup)]
    paired = over_ideal_by_round(requests, outcomes, dropped)
    rows = [dict(base, **describe_request(request, state, fast_path), **summary(outcomes[request], dropped[request]),
                 **paired.get(request, {}))
            for request in requests]
    if config.mode == "ratios" and config.k is not None and "error" not in rows[0]:
        rows[0].update(scoring_costs(state, model, prompt))
    if config.mode != "batch":
        flops = encoder_flops(state, model, prompt)
        for row in rows:
            row["encoder_flops"] = flops
    if config.mode == "compare":
        agreement = encoder_agreement(state, model, prompt) if fast_path else dict(encoder_identical=True,
                                                                                    encoder_max_rel_diff=0.0)
        for row in rows:
            if row["method"] != "stock":
                row.update(agreement)
    if config.mode == "batch":
        for row in rows:
            row.update(decode_step(model, row))
    if config.largest_batch:
        largest_batches(state, model, preset, base, requests=requests, outcomes=outcomes, prompts=prompts, rows=rows)
    state.rows.extend(rows)


def _rate(measure, state: BenchState, *args) -> float:
    """One of the device's rates (``roofline.gemm_tflops``: matrix products in the run's dtype;
    ``roofline.copy_tb_s``: copy bandwidth), measured now; NaN if it fails."""
    try:
        return measure(state.meter, *args)
    except Exception:
        release_memory()
        return math.nan


def _run_record(state: BenchState) -> dict:
    """The columns every row of this run shares: the mode, what runs where, how it is timed."""
    config, where = state.config, environment(state.device)
    return dict(
        mode=config.mode,
        card=where.card,
        device=str(state.device),
        dtype=str(state.dtype).removeprefix("torch."),
        attn=config.attn_implementation,
        repeats=config.repeats,
        warmup=config.warmup,
        decode_tokens=config.decode_tokens,
        torch=where.versions["torch"],
        transformers=where.versions["transformers"],
        kvprune=where.versions["kvprune"],
        date=where.time,
        command=config.command,
    )


def _forget_compiled() -> None:
    """Drop the compiled decode steps of a model that is gone (they hold its graphs and memory)."""
    if "torch._dynamo" in sys.modules:
        torch._dynamo.reset()
