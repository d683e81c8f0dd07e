"""``kvprune estimate``: what a sweep will cost on this device, before its first real sample.

For each task, the runs the sweep would make (the unpruned one, each method at each ratio) are priced
in three ways (``measure``): kvprune one sample at a time (its fast path), with the sweep's batching
and sharing (plus its timing subset, which runs one at a time), and AudioMarathon's way. Each method
is timed at its lowest, middle and highest ratio and the others are interpolated linearly (cost moves
smoothly with the kept length). Prompts are the task's own samples where its data is there (a
checkpoint's processor builds them), else prompts of the model's real architecture at lengths spread
over the task's published range (``published``); a task's sample count is its data's, else the
published one. The answer length priced is the task's ``max_new_tokens`` (or ``--max-new-tokens``):
random weights never stop, and which length was used is said per task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..bench.presets import PRESETS, Preset
from ..setup.device import default_device
from ..sweep.plan import PlannedRun, load_tasks, runs_of
from .config import EstimateConfig
from .measure import MODES, Cost, Timer
from .published import published

HOUR = 3600.0


@dataclass
class TaskPlan:
    """What one task's estimate rests on."""

    name: str
    samples: int
    samples_source: str
    seconds: list[float]  # the audio lengths timed
    answer_tokens: int
    answer_source: str


def run_estimate(config: EstimateConfig, progress: bool = True, after_task=None, earlier: pd.DataFrame | None = None) -> pd.DataFrame:
    """Time and price every task of ``config``; one row per task and mode, then the totals.
    ``after_task(table)``, if given, receives the table so far after each task (to keep partial results);
    ``earlier``: the rows of an interrupted estimate of the same settings, whose tasks are not timed again
    (each row's ``call`` says which call measured it, ``compile_record`` what that call had compiled)."""
    device = torch.device(config.device or default_device())
    dtype = getattr(torch, "bfloat16" if device.type == "cuda" else "float32") if config.dtype == "auto" else getattr(torch, config.dtype)
    preset = _preset(config)
    runs = runs_of(config)
    timed = _timed_runs(runs, config.timed_ratios)
    tasks = load_tasks(config.tasks, config.protocol, family=preset.family.name)  # the model's form of each task
    rows = [] if earlier is None else earlier[earlier["task"] != "total"].to_dict("records")
    done = {row["task"] for row in rows}
    call = 1 + max((int(row["call"]) for row in rows), default=0)
    plans = [_plan(task, config) for task in tasks if task.name not in done]
    if not plans:  # an estimate resumed after its last task: nothing to build or time
        return _table(rows, device)
    model = preset.build(device, dtype, config.attn_implementation)
    timer = Timer(model, config.decode_tokens, config.batch_size, config.reuse_encoder)
    _warm_up(timer, preset, model, plans, timed)
    settings = settings_key(config)
    bar = tqdm(total=len(plans) * len(timed) * 3, disable=not progress, unit="run", desc="estimate")
    for plan in plans:
        prompts = {s: preset.prompt(model, s, 0).inputs for s in spread(plan.seconds, config.samples_per_task)}
        costs = _measure(timer, preset, config, plan, prompts, timed, bar)
        record = json.dumps(timer.compile_record())  # what this call had compiled by the end of this task
        rows += [dict(row, call=call, compile_record=record, settings=settings) for row in _priced(plan, runs, costs, config)]
        if after_task is not None:
            after_task(_table(rows, device))
    bar.close()
    return _table(rows, device)


def settings_key(config: EstimateConfig) -> str:
    """What an estimate's numbers depend on (every setting but where it is written): an interrupted
    estimate resumes only under the same."""
    fields = {k: str(v) for k, v in sorted(vars(config).items()) if k not in ("out",)}
    return json.dumps(fields, sort_keys=True)


def _table(rows: list[dict], device: torch.device) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    summed = ["gpu_hours", "prefill_hours", "decode_hours", "timing_subset_hours", "samples", "sample_runs"]
    totals = table.groupby("mode", sort=False)[summed].sum().reset_index()
    totals["task"] = "total"
    table = pd.concat([table, totals], ignore_index=True)
    table.attrs["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return table


def _preset(config: EstimateConfig) -> Preset:
    if config.preset is not None:
        return PRESETS.get(config.preset)
    from transformers import AutoConfig

    from kvprune.models.loading import family_of_checkpoint

    path = config.models[0]
    family, _ = family_of_checkpoint(path, config.trust_remote_code)
    checkpoint = AutoConfig.from_pretrained(path, trust_remote_code=config.trust_remote_code)
    return Preset(path, family, lambda: checkpoint)  # the checkpoint's architecture; weights do not change timing


def _timed_runs(runs: list[PlannedRun], count: int = 3) -> list[PlannedRun]:
    """The unpruned run, and each method at its lowest, (middle,) and highest ratio."""
    timed = [run for run in runs if run.press is None]
    by_method: dict[str, list[PlannedRun]] = {}
    for run in runs:
        if run.press is not None:
            by_method.setdefault(run.method_id, []).append(run)
    for method_runs in by_method.values():
        ordered = sorted(method_runs, key=lambda run: run.ratio)
        picks = {0, len(ordered) // 2, len(ordered) - 1} if count == 3 else {0, len(ordered) - 1}
        timed += [ordered[i] for i in sorted(picks)]
    return timed


def _plan(task, config: EstimateConfig) -> TaskPlan:
    size = published(task.name)
    answer = config.max_new_tokens or task.max_new_tokens
    answer_source = "--max-new-tokens" if config.max_new_tokens else "the task's max_new_tokens"
    if config.data_root is not None and (config.data_root / task.data_dir).is_dir():
        samples = task.load(config.data_root, limit=config.limit, strict=False)
        seconds = [s for s in (_duration(p) for sample in samples for p in task.render(sample).files) if s]
        return TaskPlan(task.name, len(samples), "its data", seconds or [30.0], answer, answer_source)
    if size is None:
        raise ValueError(f"task {task.name}: no data under --data-root and no published size; give --data-root.")
    samples = min(size.samples, config.limit) if config.limit else size.samples
    return TaskPlan(task.name, samples, f"published ({size.source})", list(size.seconds), answer, answer_source)


def _duration(path) -> float | None:
    import soundfile

    try:
        info = soundfile.info(str(path))
        return info.frames / info.samplerate
    except Exception:
        return None


def spread(seconds: list[float], count: int) -> list[float]:
    """``count`` lengths over the task's range (its shortest to its longest audio): the middles of ``count``
    equal parts, so that any count has the range's middle as its mean (one length is the middle, not the
    shortest: the one-at-a-time ways and the batches are timed at lengths of the same mean)."""
    low, high = min(seconds), max(seconds)
    return [round(low + (i + 0.5) * (high - low) / count, 1) for i in range(count)]


def _warm_up(timer: Timer, preset: Preset, model, plans: list[TaskPlan], timed: list[PlannedRun]) -> None:
    """Compile before timing: each way of choosing layers (unpruned, each method) once, alone and batched,
    on the shortest prompt."""
    shortest = min(min(plan.seconds) for plan in plans)
    inputs = preset.prompt(model, shortest, 0).inputs
    seen = set()
    for run in timed:
        if run.method in seen:
            continue
        seen.add(run.method)
        timer.batch1(inputs, run.press)
        timer.sweep([inputs] * timer.batch_size, run.press, first_of_batch=True)


def _measure(timer: Timer, preset: Preset, config: EstimateConfig, plan: TaskPlan, prompts: dict,
             timed: list[PlannedRun], bar) -> dict:
    """Per mode and timed run, what one sample-run costs for this task's answer length: (prefill s, decode s)."""
    alone = list(prompts.values())
    batched_seconds = spread(plan.seconds, config.batch_size * config.batches_per_task)
    costs: dict[str, dict[PlannedRun, tuple[float, float]]] = {mode: {} for mode in MODES}
    for run in timed:
        costs["batch1"][run] = _mean_parts([timer.batch1(p, run.press) for p in alone], plan.answer_tokens)
        bar.update()
        costs["audiomarathon"][run] = _mean_parts([timer.audiomarathon(p, run.press) for p in alone], plan.answer_tokens)
        bar.update()
    batches = [batched_seconds[i : i + config.batch_size] for i in range(0, len(batched_seconds), config.batch_size)]
    per_batch = []
    for lengths in batches:
        batch = [prompts.get(s) or preset.prompt(timer.model, s, 0).inputs for s in lengths]
        # the sweep's order: each batch under every run, the unpruned first
        per_batch.append({run: timer.sweep(batch, run.press, first_of_batch=index == 0) for index, run in enumerate(timed)})
    for run in timed:
        costs["sweep"][run] = _mean_parts([b[run] for b in per_batch], plan.answer_tokens)
        bar.update()
    costs["sampled_lengths"] = len(alone) + len(batched_seconds)
    return costs


def _mean_parts(measured: list[Cost], answer_tokens: int) -> tuple[float, float]:
    parts = np.array([cost.parts(answer_tokens) for cost in measured])
    return float(parts[:, 0].mean()), float(parts[:, 1].mean())


def _priced(plan: TaskPlan, runs: list[PlannedRun], costs: dict, config: EstimateConfig) -> list[dict]:
    """One row per mode: the task's sample-runs, seconds one costs (mean over runs), and GPU-hours in all,
    in prefill (audio encoder included), in decoding, and in the timing subset (sweep mode)."""
    rows = []
    for mode in MODES:
        per_run = np.array([_interpolated(costs[mode], run, runs) for run in runs])  # (runs, [prefill, decode])
        prefill, decode = plan.samples * per_run.sum(axis=0)
        subset, timing = 0.0, ""
        if mode == "sweep" and (config.batch_size > 1 or config.reuse_encoder) and config.timing_samples:
            alone = min(config.timing_samples, plan.samples)
            subset = alone * sum(sum(_interpolated(costs["batch1"], run, runs)) for run in runs)
            timing = f"timing subset included: {alone} samples x {len(runs)} runs, one at a time"
        rows.append(dict(
            task=plan.name, mode=mode, samples=plan.samples, samples_source=plan.samples_source,
            runs=len(runs), sample_runs=plan.samples * len(runs), audio_seconds=f"{min(plan.seconds):g}-{max(plan.seconds):g}",
            answer_tokens=plan.answer_tokens, answer_source=plan.answer_source,
            seconds_per_sample_run=float(per_run.sum(axis=1).mean()), gpu_hours=(prefill + decode + subset) / HOUR,
            prefill_hours=prefill / HOUR, decode_hours=decode / HOUR, timing_subset_hours=subset / HOUR, note=timing,
            timed_lengths=costs["sampled_lengths"],
        ))
    return rows


def _interpolated(costs: dict[PlannedRun, tuple[float, float]], run: PlannedRun, runs: list[PlannedRun]) -> tuple[float, float]:
    """A run's (prefill, decode) cost: measured, or interpolated linearly in the ratio between its method's
    timed ratios."""
    if run in costs:
        return costs[run]
    timed = sorted((r.ratio, cost) for r, cost in costs.items() if r.method_id == run.method_id)
    ratios = [r for r, _ in timed]
    return tuple(float(np.interp(run.ratio, ratios, [cost[part] for _, cost in timed])) for part in (0, 1))
