"""The numbers a person reads first: per task, the unpruned score and, per method, the score and the
prefill speedup at each ratio. ``kvprune sweep`` prints it when it ends; ``report.md`` opens with it.

Numbers have one format everywhere: scores with one decimal (0-100), speedups with two and a ``×``,
and a ``~`` after a speedup within the timing noise (the middle half of the per-sample speedups
includes 1×: on a CPU or a model this small, pruning does not measurably change prefill time).
"""

from __future__ import annotations

import math

import pandas as pd

from ..markdown import markdown_table
from .config import BASELINE
from .summary import direction

NOISE_MARK = "~"
NOISE_NOTE = (f"{NOISE_MARK}: within timing noise (the middle half of the per-sample speedups, each sample against its own "
              "unpruned run, includes 1×)")


def score_text(value) -> str:
    return "—" if value is None or pd.isna(value) else f"{value:.1f}"


def speedup_text(value, within_noise=False) -> str:
    if value is None or pd.isna(value):
        return "—"
    return f"{value:.2f}×" + (NOISE_MARK if within_noise is True else "")


def ratio_text(value: float) -> str:
    return f"{value:g}"


def _tasks(summary: pd.DataFrame):
    """(model, task, the task's rows, its baseline row or None), in order."""
    for (model, task), rows in summary.groupby(["model", "task"], sort=True):
        baseline = rows[rows["method"] == BASELINE]
        yield model, task, rows[rows["method"] != BASELINE], (baseline.iloc[0] if len(baseline) else None)


def _title(task: str, rows: pd.DataFrame, baseline) -> str:
    first = baseline if baseline is not None else rows.iloc[0]
    metric = f"{first['metric']}, {direction(bool(first['higher_is_better']))}"
    samples = int(first["samples"])
    unpruned = f"unpruned {score_text(baseline['score'])}" if baseline is not None else "no unpruned run"
    return f"{task} ({metric}; {samples} samples): {unpruned}"


def headline_text(summary: pd.DataFrame) -> str:
    """Plain text for the terminal: per task, a line of ratios, then per method its scores and,
    below them, its prefill speedups."""
    models = summary["model"].nunique() > 1
    lines = []
    for model, task, rows, baseline in _tasks(summary):
        ratios = sorted(rows["ratio"].unique())
        name = f"{model} / {task}" if models else task
        lines.append(_title(name, rows, baseline))
        label_width = max([len("prefill") + 2, *(len(m) for m in rows["method"])]) + 1
        width = max([7, *(len(speedup_text(v, True)) + 1 for v in rows["prefill_speedup"])])
        lines.append(f"  {'ratio':<{label_width}}{'':9}" + "".join(f"{ratio_text(r):>{width}}" for r in ratios))
        for method, group in rows.groupby("method", sort=True):
            at = {r: row for r, row in zip(group["ratio"], group.to_dict("records"))}
            scores = "".join(f"{score_text(at[r]['score']) if r in at else '':>{width}}" for r in ratios)
            speed = "".join(
                f"{speedup_text(at[r]['prefill_speedup'], at[r].get('prefill_within_noise')) if r in at else '':>{width}}"
                for r in ratios
            )
            lines.append(f"  {method:<{label_width}}{'score':9}{scores}")
            lines.append(f"  {'':<{label_width}}{'prefill':9}{speed}")
        lines.append("")
    if _any_noise(summary):
        lines.append(NOISE_NOTE)
    return "\n".join(lines).rstrip() + "\n"


def headline_markdown(summary: pd.DataFrame) -> str:
    """The same as Markdown: per task a table of methods x ratios, each cell 'score (speedup)'."""
    models = summary["model"].nunique() > 1
    parts = []
    for model, task, rows, baseline in _tasks(summary):
        ratios = sorted(rows["ratio"].unique())
        name = f"{model} / {task}" if models else task
        table = []
        for method, group in rows.groupby("method", sort=True):
            at = {r: row for r, row in zip(group["ratio"], group.to_dict("records"))}
            table.append([method] + [
                f"{score_text(at[r]['score'])} ({speedup_text(at[r]['prefill_speedup'], at[r].get('prefill_within_noise'))})"
                if r in at else "" for r in ratios
            ])
        header = ["method", *(f"ratio {ratio_text(r)}" for r in ratios)]
        parts.append(f"**{_title(name, rows, baseline)}**\n\n" + markdown_table(header, table) + "\n")
    legend = "Each cell: score (prefill speedup against the unpruned run)."
    if _any_noise(summary):
        legend += f" {NOISE_NOTE}."
    return "\n".join(parts) + "\n" + legend + "\n"


def _any_noise(summary: pd.DataFrame) -> bool:
    return "prefill_within_noise" in summary and bool(summary["prefill_within_noise"].eq(True).any())


def noise_share(summary: pd.DataFrame) -> float:
    """The fraction of pruned runs with a prefill speedup whose speedup is within the timing noise
    (NaN when none has one: nothing was timed)."""
    pruned = summary[(summary["method"] != BASELINE) & summary["prefill_speedup"].notna()]  # those with a speedup
    if "prefill_within_noise" not in pruned or not len(pruned):
        return math.nan
    return float(pruned["prefill_within_noise"].eq(True).mean())
