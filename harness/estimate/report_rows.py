"""The rows of ``estimate.csv``: per task and way of running it, what it costs and what that rests on
(samples, their lengths, their answers, how many batches or samples were timed); then what a sweep
pays once (``fixed``: starting, loading, planning, writing its outputs, ending); per way, their sums
(``total``)."""

from __future__ import annotations

import pandas as pd

from .config import EstimateConfig
from .pricing import ModeCost
from .published import published
from .synthetic import SYNTHETIC

HOUR = 3600.0
FIXED = "fixed"  # the task column of the row of what a sweep pays once
TOTAL = "total"  # the task column of each way's sums
SUMMED = ["seconds", "seconds_low", "seconds_high", "gpu_hours", "prefill_hours", "decode_hours", "timing_subset_hours",
          "overhead_hours", "once_hours", "graphs", "samples", "sample_runs"]


def task_rows(task, planned: list, answers: list[int], runs: list, costs: dict[str, ModeCost],
              config: EstimateConfig) -> list[dict]:
    """One row per way of running ``task`` (``costs``: per mode, and the sweep's timing subset)."""
    lengths = [p.seconds or 0.0 for p in planned]
    base = dict(task=task.name, samples=len(planned), samples_source=_samples_source(task, planned), runs=len(runs),
                sample_runs=len(planned) * len(runs), audio_seconds=f"{min(lengths):g}-{max(lengths):g}",
                answer_tokens=round(sum(answers) / len(answers), 1), answer_source=_answer_source(planned))
    subset = costs.get("timing_subset")
    rows = []
    for mode in config.modes:
        cost = costs[mode]
        extra = subset if mode == "sweep" and subset is not None else None
        seconds = [cost.total, cost.low, cost.high]
        if extra is not None:
            seconds = [a + b for a, b in zip(seconds, [extra.total, extra.low, extra.high])]
        note = (f"timing subset included: {extra.units} samples x {len(runs)} runs, one at a time"
                if extra is not None else "")
        rows.append(dict(
            base, mode=mode, seconds=seconds[0], seconds_low=seconds[1], seconds_high=seconds[2],
            seconds_per_sample_run=seconds[0] / base["sample_runs"], gpu_hours=seconds[0] / HOUR,
            prefill_hours=cost.prefill / HOUR, decode_hours=cost.decode / HOUR,
            timing_subset_hours=(extra.total if extra is not None else 0.0) / HOUR,
            overhead_hours=cost.overhead / HOUR, once_hours=cost.once / HOUR, lazy_seconds=cost.lazy,
            graphs=cost.graphs + (extra.graphs if extra is not None else 0.0),
            timed=f"{cost.timed_units} of {cost.units} {'batches' if mode == 'sweep' else 'samples'}", note=note,
        ))
    return rows


def fixed_rows(fixed: dict[str, float], config: EstimateConfig) -> list[dict]:
    """What each way pays once per sweep, whatever its tasks: the same for all."""
    seconds = sum(fixed.values())
    note = ", ".join(_part(name, value) for name, value in fixed.items())
    return [dict(task=FIXED, mode=mode, samples=0, sample_runs=0, seconds=seconds, seconds_low=seconds,
                 seconds_high=seconds, gpu_hours=seconds / HOUR, prefill_hours=0.0, decode_hours=0.0,
                 timing_subset_hours=0.0, overhead_hours=seconds / HOUR, once_hours=0.0, graphs=0.0, note=note)
            for mode in config.modes]


def totals_table(rows: list[dict]) -> pd.DataFrame:
    """The estimate's rows and, per mode, their sums (task ``total``)."""
    table = pd.DataFrame(rows)
    summed = [column for column in SUMMED if column in table]  # rows resumed from an older estimate.csv may lack some
    totals = table.groupby("mode", sort=False)[summed].sum().reset_index()
    totals["task"] = TOTAL
    return pd.concat([table, totals], ignore_index=True)


def with_process_end(table: pd.DataFrame, seconds: float) -> pd.DataFrame:
    """``table`` with what the process paid to end (``process_end``) in each way's fixed row and total."""
    rows = table[table["task"] != TOTAL].copy()
    fixed = rows["task"] == FIXED
    for column in ("seconds", "seconds_low", "seconds_high"):
        rows.loc[fixed, column] += seconds
    for column in ("gpu_hours", "overhead_hours"):
        rows.loc[fixed, column] += seconds / HOUR
    rows.loc[fixed, "note"] = rows.loc[fixed, "note"] + ", " + _part("end", seconds)
    return totals_table(rows.to_dict("records"))


def _part(name: str, seconds: float) -> str:
    """One of the fixed costs as the fixed row's note says it."""
    return f"{name} {seconds:.1f} s"


def _samples_source(task, planned: list) -> str:
    meta = planned[0].sample.meta.get(SYNTHETIC)
    if meta is None:
        return "its data"
    if "published" in meta["answer_source"]:
        return f"published ({published(task.name).source}); made-up prompts"
    return "its data's durations; made-up prompts"


def _answer_source(planned: list) -> str:
    meta = planned[0].sample.meta.get(SYNTHETIC)
    return meta["answer_source"] if meta is not None else "the data's gold answers, the model's tokenizer"
