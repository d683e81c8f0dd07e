"""``kvprune estimate``: what a sweep will cost on this device, before its first real sample.

It runs the sweep's own code (``sweep.samples.SampleRunner`` on the sweep's ``Executor``: the same
batches, ordered by length, the same passes, the same sharing) on a few batches and samples of each
task, every call and batch clocked (``timing``), and prices the rest (``pricing``). Three ways:

* ``sweep``: the sweep's settings: its scoring batches of ``--batch-size`` (``--batches-per-task`` of
  them timed: the first and last full ones, others spread between, and the smaller last one), and its
  timing subset (``--timing-samples`` per task run alone), priced from the samples timed alone;
* ``batch1``: kvprune one sample per call, nothing shared (``--samples-per-task`` samples timed, at
  lengths spread over the task's);
* ``audiomarathon``: AudioMarathon's way, for reference: the stock audio encoder and stock
  ``generate`` on its dynamic cache, one sample per call.

Samples are the sweep's (``synthetic.GoldAnswers``: a checkpoint on its tasks' data) or made up at
the data's or the published durations (``synthetic.SyntheticPrompts``: a preset's random weights,
or a checkpoint without the task's data), each with content of its own. Answers are decoded to
planned lengths (``answers``), a batch to its longest. Each timed call is repeated (``--repeats``):
figures are medians with their spread, and a call faster than its compute floor stops the estimate
(``floor``). What a sweep pays once is priced too: starting, loading the model, planning (reading
every sample), compilations and graph captures (as the estimate met them), writing the outputs
(``outputs``), and ending the process (timed from outside by the command: ``process_end``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from kvprune.encoders import fast_audio_encoder
from kvprune.generation.kept_states import ROOM

from ..setup.device import cpu_threads, resolve_cache
from ..setup.methods import check_methods
from ..sweep.identity import AudioDigests
from ..sweep.plan import PlannedRun, checked_presses, load_tasks, runs_of
from ..sweep.samples import SampleRunner
from ..sweep.schedule import ALONE, Schedule, Work, batches
from ..sweep.store import ResultStore, read_rows
from .config import MODES, EstimateConfig
from .floor import check_floor, layer_parameters, matrix_rate
from .outputs import outputs_seconds
from .pricing import frames, mode_cost, payers
from .report_rows import FIXED, TOTAL, fixed_rows, task_rows, totals_table
from .synthetic import GoldAnswers, SyntheticPrompts, has_data
from .timing import TimedBatches, TimedExecutor


def run_estimate(config: EstimateConfig, *, progress: bool = True, after_task=None, earlier: pd.DataFrame | None = None,
                 outputs: bool = True, loaded=None, timing_subset: bool = True) -> pd.DataFrame:
    """Time and price every task of ``config``; one row per task and mode, the fixed costs, the totals.
    ``after_task(table, calls, units)``, if given, receives the table so far after each task (to keep partial
    results) and what that task timed (``timing.Call`` and ``timing.Unit`` records);
    ``earlier``: the rows of an interrupted estimate of the same settings, whose tasks are not timed again;
    ``outputs``: price writing the sweep's outputs (the same at any batch size: ``auto_batch`` leaves it out);
    ``loaded``: the model, loaded already (``auto_batch``: one load for every size it prices);
    ``timing_subset``: price the sweep's timing subset (its samples alone, timed as ``batch1`` is: the same
    at any batch size, so ``auto_batch`` leaves it out and times no sample alone unless ``batch1`` is asked)."""
    started = time.perf_counter()
    rows = [] if earlier is None else earlier[~earlier["task"].isin([TOTAL, FIXED])].to_dict("records")
    done = {row["task"] for row in rows}
    call = 1 + max((int(row["call"]) for row in rows), default=0)
    name = config.models[0] if config.models else config.preset
    preset = _preset(config) if config.preset else None
    model_source = SyntheticPrompts(preset)  # a checkpoint, or random weights at the preset's shape
    family = model_source.family(name, config.trust_remote_code) if config.protocol else None
    tasks = load_tasks(config.tasks, config.protocol, family=family)
    runs = runs_of(config)
    checking = time.perf_counter()  # what the sweep checks before it loads the model: every method on its skeleton
    check_methods(name, model_source.skeleton(name, config.trust_remote_code, config.attn_implementation),
                  checked_presses(runs), static=resolve_cache(config.cache, config.device or "cpu") == "static", prunes=True)
    checking = time.perf_counter() - checking
    loading = time.perf_counter()
    loaded = loaded or model_source.load(name, config, config.device)
    loading = time.perf_counter() - loading
    tokenizer = getattr(loaded.processor, "tokenizer", loaded.processor)
    timed = timed_runs(runs, config.timed_ratios)
    cache = resolve_cache(config.cache, loaded.device)
    engine, stock = TimedExecutor(loaded, cache, runs, config.compile_prefill), TimedExecutor(loaded, "dynamic", runs)
    room = engine.engine.state_room if engine.engine is not None else ROOM  # how its runs share decode states
    counts, planning = {}, checking
    stamp = dict(call=call, settings=settings_key(config), device=_device(loaded))
    with ExitStack() as lifetime:
        scratch = Path(lifetime.enter_context(tempfile.TemporaryDirectory(prefix="kvprune-estimate-")))
        digests, written = AudioDigests(scratch), ResultStore(scratch)  # the sweep's: rows written as it writes them
        threads = lifetime.enter_context(cpu_threads(loaded.model))
        rate = matrix_rate(loaded.device, next(loaded.model.parameters()).dtype)
        layers, per_layer = layer_parameters(loaded.model)
        bar = tqdm(total=len(tasks), disable=not progress, unit="task", desc="estimate")
        for task in tasks:
            data = config.data_root if has_data(config.data_root, task) else None
            task_source = GoldAnswers(tokenizer) if data and preset is None else SyntheticPrompts(preset, data)
            start = time.perf_counter()
            planned = [task_source.planned(task, s, digests) for s in task_source.samples(task, config)]
            planned = [p for p in planned if not p.sample.problem]
            planning += time.perf_counter() - start
            counts[task.name] = (len(planned), Schedule.of(config).timing_count(len(planned)))
            if task.name in done or not planned:
                bar.update()
                continue
            timers = {mode: TimedBatches(SampleRunner(config, written, executor, source=task_source), executor, loaded)
                      for mode, executor in (("sweep", engine), ("batch1", engine), ("audiomarathon", stock))}
            with fast_audio_encoder(loaded.model) if config.encoder == "fast" else ExitStack():
                _time_sweep(timers["sweep"], task, planned, timed, config)
                if timing_subset or "batch1" in config.modes:
                    _time_alone(timers["batch1"], task, planned, timed, config, "batch1")
            if "audiomarathon" in config.modes:
                _time_alone(timers["audiomarathon"], task, planned, timed, config, "audiomarathon")
            calls = [c for c in engine.calls + stock.calls if c.context["task"] == task.name]
            check_floor(calls, [run.press for run in runs], task.name, layers, per_layer, rate)
            costs = _costs(engine.calls + stock.calls, [u for t in timers.values() for u in t.units], task.name, runs,
                           planned, config, timing_subset=timing_subset, room=room)
            record = json.dumps(dict(_compile_record(engine), cpu_threads=threads, matrix_tflops=round(rate / 1e12, 4)))
            answers = [min(task_source.answer_tokens(p), config.max_new_tokens or task.max_new_tokens) for p in planned]
            rows += [dict(row, compile_record=record, **stamp) for row in task_rows(task, planned, answers, runs, costs, config)]
            if after_task is not None:
                after_task(totals_table(rows), calls, [u for t in timers.values() for u in t.units])
            bar.update()
        bar.close()
        written.close()
        writing = outputs_seconds(read_rows(scratch), runs, tasks, counts, plots=True) if outputs else 0.0
    fixed = dict(start=_process_age(started), load=loading, plan=planning, outputs=writing)
    return totals_table(rows + [dict(row, **stamp) for row in fixed_rows(fixed, config)])


def timed_runs(runs: list[PlannedRun], count: int = 3) -> list[PlannedRun]:
    """The unpruned run, and each method at its lowest, (middle,) and highest ratio, in the sweep's order."""
    picks = set()
    by_method: dict[str, list[PlannedRun]] = {}
    for run in runs:
        by_method.setdefault(run.method_id, []).append(run)
    for method_runs in by_method.values():
        ordered = sorted(method_runs, key=lambda run: run.ratio)
        chosen = {0, len(ordered) // 2, len(ordered) - 1} if count == 3 else {0, len(ordered) - 1}
        picks.update(id(ordered[i]) for i in chosen)
    return [run for run in runs if id(run) in picks]


def settings_key(config: EstimateConfig) -> str:
    """What an estimate's numbers depend on (every setting but where it is written): an interrupted
    estimate resumes only under the same."""
    fields = {k: str(v) for k, v in sorted(vars(config).items()) if k not in ("out",)}
    return json.dumps(fields, sort_keys=True)


def _time_sweep(timer: TimedBatches, task, planned: list, timed: list[PlannedRun], config: EstimateConfig) -> None:
    """The sweep's scoring batches (ordered by length), a few of them, each ``repeats`` times."""
    how = Schedule.of(config).scoring
    scoring = batches([Work(p, timed) for p in planned], how.batch_size)
    for index in chosen_batches([len(b) for b in scoring], config.batches_per_task):
        for repeat in range(config.repeats):
            timer.time_batch(task, scoring[index], timed, how, dict(task=task.name, mode="sweep", unit=index, repeat=repeat))


def chosen_batches(sizes: list[int], count: int) -> list[int]:
    """Which batches to time: ``count`` of the full ones, spread from the first to the last, and the last
    one if it is smaller."""
    full = [i for i, size in enumerate(sizes) if size == sizes[0]]
    picks = {full[round(k * (len(full) - 1) / max(1, count - 1))] for k in range(min(count, len(full)))}
    return sorted(picks | ({len(sizes) - 1} if sizes[-1] != sizes[0] else set()))


def _time_alone(timer: TimedBatches, task, planned: list, timed: list[PlannedRun], config: EstimateConfig, mode: str) -> None:
    """``samples_per_task`` samples at lengths spread over the task's, one at a time with nothing shared."""
    ordered = sorted(planned, key=lambda p: p.seconds or 0.0)
    count = min(config.samples_per_task, len(ordered))
    picks = sorted({int((k + 0.5) * len(ordered) / count) for k in range(count)})
    for index in picks:
        for repeat in range(config.repeats):
            timer.time_batch(task, [Work(ordered[index], timed)], timed, ALONE, dict(task=task.name, mode=mode, unit=index, repeat=repeat))


def _costs(calls, units, task: str, runs, planned, config: EstimateConfig, *, timing_subset: bool = True,
           room: float = ROOM) -> dict:
    """Per mode, what the whole task costs; the sweep's with its timing subset (priced from ``batch1``); ``room``:
    the engine's ``state_room``, by which its runs make decode states."""
    schedule = Schedule.of(config)
    scoring = [(sum(work.sample.seconds or 0.0 for work in b) / len(b), len(b))
               for b in batches([Work(p, []) for p in planned], schedule.scoring.batch_size)]
    alone = [(p.seconds or 0.0, 1) for p in planned]
    costs = {}
    for mode in MODES:
        call_frame, unit_frame = frames(calls, units, task, mode)
        if not call_frame.empty:
            paying = payers(runs) if mode == "sweep" and config.share_layers else set()
            costs[mode] = mode_cost(call_frame, unit_frame, runs, scoring if mode == "sweep" else alone, paying, room)
    subset = planned[: schedule.timing_count(len(planned))]
    if timing_subset and subset and "batch1" in costs:
        call_frame, unit_frame = frames(calls, units, task, "batch1")
        costs["timing_subset"] = mode_cost(call_frame, unit_frame, runs, [(p.seconds or 0.0, 1) for p in subset], room=room)
    return costs


def _preset(config: EstimateConfig):
    from ..bench.presets import PRESETS

    return PRESETS.get(config.preset)


def _compile_record(executor: TimedExecutor) -> dict:
    from kvprune.generation.timing import compile_counters

    engine = executor.engine
    graphs, recompiles = compile_counters()
    if engine is None:
        return dict(compile_graphs=graphs, recompiles=recompiles)
    return dict(compile_graphs=graphs, recompiles=recompiles, cuda_graphs=engine.captures,
                decode_states=engine.states, fallbacks=engine.fallbacks, engine_unsupported=engine.unsupported)


def _device(loaded) -> str:
    device = loaded.device
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _process_age(started: float) -> float:
    """Seconds from this process's start to ``started`` (Python and the libraries loading): what a sweep's
    command pays before its first step too (0 where the system does not say)."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            up = float(uptime.read().split()[0])
        return max(0.0, up - ticks / os.sysconf("SC_CLK_TCK") - (time.perf_counter() - started))
    except (OSError, ValueError, IndexError):
        return 0.0
