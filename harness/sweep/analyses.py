"""Two analyses AudioMarathon reports, for any task: score against audio duration, and a radar chart of
scores per task.

Duration: samples are bucketed by the audio the model heard (``audio_seconds``) as AudioMarathon's
``analyse_audio_duration`` scripts bucket durations, each task by its own script's edges, labels
and boundaries (``Task.duration_buckets``: ``benchmarks/audiomarathon/durations.py``; Vox_age's script
has none, so it and every task outside AudioMarathon take ``analyse_all.py``'s); each bucket is
scored with the task's own metrics, as the breakdowns are (the scripts only count; scoring per
bucket is ours). ``duration_breakdown`` writes them as rows of breakdown.csv and report.md under
the field ``audio duration``, and ``plot_duration`` draws them per model and task, one line per
run. A suite with a view of its tasks together (AudioMarathon's, on ``analyse_all.py``'s buckets,
as that script counts the ten tasks' durations together) adds rows under its own name: per bucket,
the samples of all its tasks and the mean of the primary scores of the tasks with samples there
(``tasks`` names them: a bucket's tasks differ, so buckets compare tasks as much as durations).
A task (suite) whose samples all fall in one bucket has nothing to show and is left out.

Radar (``plot_radar``): one figure per model, one panel per ratio, a polygon per method (the
unpruned run in each), spokes the tasks' primary scores (error rates such as WER drawn as 100 minus
the rate, so outward is better everywhere), as AudioMarathon's leaderboard figure draws its models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ..tasks.suites import Suite
from ..tasks.task import Task, get_task
from .config import BASELINE
from .plots import slug
from .summary import GROUP

DURATION_FIELD = "audio duration"
SUITE_METRIC = "mean primary score"  # a suite's score per bucket


def duration_breakdown(results: pd.DataFrame, tasks: Mapping[str, Task], suites: Sequence[Suite] = ()) -> pd.DataFrame:
    """Per run identity and duration bucket of the task's own buckets (shortest first): samples and
    the task's metrics (``score``: the primary one), for the tasks whose samples span two buckets or
    more; then the views of ``suites`` over their tasks together."""
    if results.empty or "audio_seconds" not in results:
        return pd.DataFrame()
    frame = results.reindex(columns=list(dict.fromkeys([*results.columns, *GROUP])))
    rows = []
    for (model, task_name, method, layer, method_id, settings_id, ratio), group in frame.groupby(GROUP, sort=True, dropna=False):
        task = _task(task_name, tasks)
        identity = dict(model=model, task=task_name, method=method, ratio=ratio, layer=None if pd.isna(layer) else int(layer),
                        method_id=method_id, settings_id=settings_id)
        for value, subset in _buckets(group, task.duration_buckets):
            metrics = task.summarize(subset.drop(columns="bucket").to_dict("records"))
            rows.append(dict(identity, field=DURATION_FIELD, value=value, samples=len(subset), metric=task.primary_metric,
                             score=metrics[task.primary_metric], **metrics))
    return pd.DataFrame(rows + _suite_rows(frame, tasks, suites))


def _suite_rows(frame: pd.DataFrame, tasks: Mapping[str, Task], suites: Sequence[Suite]) -> list[dict]:
    """Per suite with a view of its tasks together, model and run that ran two of its tasks or more,
    and bucket: the samples of its tasks there, and the mean of those tasks' primary scores on them."""
    rows = []
    run = ["model", "method", "layer", "method_id", "ratio"]
    for suite in suites:
        if suite.duration_buckets is None:
            continue
        own = frame[frame["task"].str.split("@").str[0].isin(suite.tasks)]
        for (model, method, layer, method_id, ratio), group in own.groupby(run, sort=True, dropna=False):
            if group["task"].nunique() < 2:
                continue
            for value, subset in _buckets(group, suite.duration_buckets):
                scores = {}
                for task_name, part in subset.groupby("task", sort=True):
                    task = _task(task_name, tasks)
                    scores[task.abbreviation] = task.summarize(part.drop(columns="bucket").to_dict("records"))[task.primary_metric]
                rows.append(dict(model=model, task=suite.name, method=method, ratio=ratio,
                                 layer=None if pd.isna(layer) else int(layer), method_id=method_id, field=DURATION_FIELD,
                                 value=value, samples=len(subset), metric=SUITE_METRIC,
                                 score=sum(scores.values()) / len(scores), tasks=", ".join(sorted(scores))))
    return rows


def _buckets(group: pd.DataFrame, buckets) -> list[tuple[str, pd.DataFrame]]:
    """``group``'s rows per bucket that holds some, shortest first (none when they fill fewer than two)."""
    labelled = group.assign(bucket=[None if pd.isna(s) else buckets.assign(float(s)) for s in group["audio_seconds"]])
    labelled = labelled.dropna(subset=["bucket"])
    if labelled["bucket"].nunique() < 2:
        return []
    return sorted(labelled.groupby("bucket"), key=lambda item: buckets.order(item[0]))


def _task(name: str, tasks: Mapping[str, Task]) -> Task:
    return tasks[name] if name in tasks else get_task(name)


def plot_duration(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Score against duration bucket, per model and task (``<model>_<task>_duration.png``)."""
    if table.empty or DURATION_FIELD not in set(table["field"]):
        return []
    table = table[table["field"] == DURATION_FIELD]
    paths = []
    for (model, task), rows in table.groupby(["model", "task"], sort=True):
        buckets = list(dict.fromkeys(rows["value"]))
        figure, axes = plt.subplots(figsize=(max(6, 1.1 * len(buckets)), 4))
        runs = sorted(rows.groupby(["method", "ratio"]), key=lambda item: (item[0][0] != BASELINE, item[0]))
        for (method, ratio), run in runs:  # the unpruned line first and widest: a tied run shows inside it
            label = "unpruned" if method == BASELINE else f"{method} {ratio:g}"
            run = run.set_index("value").reindex(buckets)
            axes.plot(range(len(buckets)), run["score"], marker="o", label=label,
                      linewidth=2.5 if method == BASELINE else 1.2, color="black" if method == BASELINE else None)
        axes.set_xticks(range(len(buckets)), [f"{b}\n(n={int(n)})" for b, n in zip(buckets, _samples(rows, buckets))])
        axes.set_xlabel("audio duration")
        axes.set_ylabel(rows["metric"].iloc[0])
        axes.set_title(f"{task}: score against audio duration ({Path(str(model)).name})")
        axes.legend(fontsize="small", ncol=2)
        paths.append(_saved(figure, out_dir / f"{slug(model)}_{slug(task)}_duration.png"))
    return paths


def _samples(rows: pd.DataFrame, buckets: list[str]) -> list[int]:
    baseline = rows[rows["method"] == BASELINE]
    counts = (baseline if not baseline.empty else rows).groupby("value")["samples"].first()
    return [int(counts.get(b, 0)) for b in buckets]


def plot_radar(summary: pd.DataFrame, out_dir: Path, tasks: Mapping[str, Task] | None = None) -> list[Path]:
    """A radar chart of every task's score per model (``<model>_radar.png``), for three tasks or more;
    spokes are named by the tasks' abbreviations (``tasks``: as they ran)."""
    tasks_by_name = tasks or {}
    paths = []
    for model, frame in summary.groupby("model"):
        tasks = sorted(frame["task"].unique())
        if len(tasks) < 3:
            continue
        frame = frame.assign(outward=[s if up else 100 - s for s, up in zip(frame["score"], frame["higher_is_better"])])
        ratios = sorted(r for r in frame["ratio"].unique() if r > 0) or [0.0]
        columns = min(3, len(ratios))
        rows_of_panels = math.ceil(len(ratios) / columns)
        figure = plt.figure(figsize=(5 * columns, 5 * rows_of_panels))
        angles = [2 * math.pi * i / len(tasks) for i in range(len(tasks))]
        baseline = frame[frame["method"] == BASELINE].set_index("task")["outward"]
        for index, ratio in enumerate(ratios, start=1):
            axes = figure.add_subplot(rows_of_panels, columns, index, projection="polar")
            _polygon(axes, angles, [baseline.get(t) for t in tasks], "unpruned", linewidth=2.5, color="black")
            at_ratio = frame[(frame["ratio"] == ratio) & (frame["method"] != BASELINE)]
            for method, rows in at_ratio.groupby("method", sort=True):
                scores = rows.set_index("task")["outward"]
                _polygon(axes, angles, [scores.get(t) for t in tasks], method)
            names = [tasks_by_name[t].abbreviation if t in tasks_by_name else t.split("@")[0] for t in tasks]
            axes.set_xticks(angles, names, fontsize="small")
            axes.set_ylim(0, 100)
            axes.set_title(f"ratio {ratio:g}")
            axes.legend(fontsize="x-small", loc="lower left", bbox_to_anchor=(0.9, 0.9))
        figure.suptitle(f"{Path(str(model)).name}: score per task (error rates as 100 - rate)")
        paths.append(_saved(figure, out_dir / f"{slug(model)}_radar.png"))
    return paths


def _saved(figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _polygon(axes, angles: list[float], scores: list, label: str, **style) -> None:
    values = [0.0 if s is None or pd.isna(s) else float(s) for s in scores]
    axes.plot([*angles, angles[0]], [*values, values[0]], label=label, **style)
