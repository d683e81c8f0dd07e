"""One row per model x task x method x ratio: the task's metrics and the timing statistics.

Metrics use every sample, failed ones included (an error is an unanswered question), and are those
of each task as the sweep ran it (its config recorded in ``runs.jsonl``), so a folder still
summarises after its task was renamed or edited. Timings use only samples that ran and were not the
warm-up, and not calls that compiled (a static cache on a GPU compiles at every new length). Speedups
and KV savings compare medians with the unpruned baseline of the same model and task; KV savings
compare the entries held after the prefill (a static cache's preallocated room left out).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from ..tasks.task import Task, get_task
from .config import BASELINE
from .store import read_results, recorded_tasks

GROUP = ["model", "task", "method", "ratio"]
MS = 1000.0
MIB = 2**20


def summarize_folder(out_dir: Path | str) -> pd.DataFrame:
    """The summary table of a sweep folder, with the tasks as it recorded them."""
    return summarize(read_results(out_dir), recorded_tasks(out_dir))


def summarize(results: pd.DataFrame, tasks: Mapping[str, Task] | None = None) -> pd.DataFrame:
    """The summary table of a results table (as ``read_results`` returns it). ``tasks``: the tasks
    by name as they ran (``recorded_tasks``); a name missing there is looked up with ``get_task``."""
    tasks = tasks or {}
    rows = []
    for (model, task_name, method, ratio), group in results.groupby(GROUP, sort=True, dropna=False):
        task = tasks[task_name] if task_name in tasks else get_task(task_name)
        metrics = task.summarize(group.to_dict("records"))
        timed = _timed(group)
        per_token = timed["decode_s"] / (timed["new_tokens"] - 1).where(timed["new_tokens"] > 1)
        rows.append(dict(
            model=model, task=task_name, method=method, ratio=ratio,
            layer=group["layer"].dropna().iloc[0] if group["layer"].notna().any() else None,
            samples=len(group), errors=int(group["error"].notna().sum()),
            metric=task.primary_metric, higher_is_better=task.higher_is_better, score=metrics[task.primary_metric],
            **metrics,
            audio_seconds=group["audio_seconds"].mean(),
            audio_tokens=group["audio_tokens"].mean(),
            kept_tokens=group["kept_tokens"].mean(),
            timed_samples=len(timed),
            prefill_ms_mean=timed["prefill_s"].mean() * MS,
            prefill_ms_median=timed["prefill_s"].median() * MS,
            decode_ms_mean=timed["decode_s"].mean() * MS,
            decode_ms_median=timed["decode_s"].median() * MS,
            decode_ms_per_token_median=per_token.median() * MS,
            decode_tokens_per_s_median=timed["decode_tokens_per_s"].median(),
            new_tokens_mean=timed["new_tokens"].mean(),
            peak_memory_mib_median=timed["peak_memory_bytes"].median() / MIB,
            kv_cache_mib_median=timed["kv_cache_bytes"].median() / MIB,
            kv_held_mib_median=timed["kv_held_bytes"].median() / MIB,
            cache=_kinds(group),
        ))
    summary = pd.DataFrame(rows)
    return _against_baseline(summary)


def _timed(group: pd.DataFrame) -> pd.DataFrame:
    ok = group["error"].isna() & ~group["warmup"].astype(bool) & ~_flag(group, "compiled")
    columns = ["prefill_s", "decode_s", "new_tokens", "decode_tokens_per_s", "peak_memory_bytes", "kv_cache_bytes",
               "kv_held_bytes"]
    timed = group.loc[ok].reindex(columns=columns)
    if "kv_held_bytes" not in group:  # results written before held bytes were recorded: dynamic caches
        timed["kv_held_bytes"] = timed["kv_cache_bytes"]
    return timed.apply(pd.to_numeric, errors="coerce")


def _flag(group: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column of the results, False where it is missing (results of older versions)."""
    return group[column].eq(True) if column in group else pd.Series(False, index=group.index)


def _kinds(group: pd.DataFrame) -> str | None:
    """The caches the group's runs decoded on ("static", "dynamic", or both joined by "+")."""
    kinds = group["cache"].dropna().unique() if "cache" in group else []
    return "+".join(sorted(kinds)) or None


def _against_baseline(summary: pd.DataFrame) -> pd.DataFrame:
    compared = ["score", "prefill_ms_median", "decode_ms_per_token_median", "kv_held_mib_median"]
    baseline = summary.loc[summary["method"] == BASELINE, ["model", "task", *compared]]
    merged = summary.merge(baseline, on=["model", "task"], how="left", suffixes=("", "_baseline"))
    merged["prefill_speedup"] = merged["prefill_ms_median_baseline"] / merged["prefill_ms_median"]
    merged["decode_speedup"] = merged["decode_ms_per_token_median_baseline"] / merged["decode_ms_per_token_median"]
    merged["kv_saved"] = 1.0 - merged["kv_held_mib_median"] / merged["kv_held_mib_median_baseline"]
    merged["score_change"] = merged["score"] - merged["score_baseline"]
    return merged.drop(columns=[f"{c}_baseline" for c in compared])


def task_average(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean primary score and prefill speedup over the tasks each model x method x ratio ran on;
    tasks whose primary metrics go opposite ways (accuracy, WER) are averaged apart."""
    grouped = summary.groupby(["model", "method", "ratio", "higher_is_better"], sort=True)
    average = grouped.agg(score=("score", "mean"), tasks=("task", "nunique"), prefill_ms_median=("prefill_ms_median", "mean"),
                          prefill_speedup=("prefill_speedup", "mean"))
    return average.reset_index()


def task_averages(summary: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``task_average`` split by metric direction, each with its title ("Task average", with its
    direction when the tasks' primary metrics go both ways)."""
    average = task_average(summary)
    mixed = average["higher_is_better"].nunique() > 1
    return [
        (f"Task average, {direction(higher)}" if mixed else "Task average", rows)
        for higher, rows in average.groupby("higher_is_better", sort=False)
    ]


def direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"

