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


NOTHING_PRUNED = "nothing pruned"
NOTHING_PRUNED_NOTE = (f"{NOTHING_PRUNED}: the run removed no token and saved no KV cache (its press's scope held none: a "
                       "prompt without audio under an audio press), so its timing says nothing about pruning")
#: how rows are labelled when their prompts did not hold their audio (``--no-audio``): ``audio_input`` -> label
INPUT_LABELS = {"none": "no audio", "caption": "caption for audio", "caption+none": "caption or no audio"}


def speedup_text(value, within_noise=False, nothing_pruned=False) -> str:
    if nothing_pruned is True:
        return NOTHING_PRUNED
    if value is None or pd.isna(value):
        return "—"
    return f"{value:.2f}×" + (NOISE_MARK if within_noise is True else "")


def row_speedup(row: dict, column: str = "prefill_speedup") -> str:
    """A summary row's speedup as every table shows it: marked within the noise, or ``nothing pruned``."""
    return speedup_text(row.get(column), row.get("prefill_within_noise"), row.get("nothing_pruned"))


def input_label(row) -> str:
    """`` [no audio]`` (or what else stood for the audio) for a summary row whose prompts did not hold
    their audio; '' for one whose did."""
    label = INPUT_LABELS.get(row.get("audio_input"))
    return f" [{label}]" if label else ""


def input_labelled(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with each pruned method labelled by what stood for the audio in its prompts, when
    not the audio itself (``frame [no audio]``; the task's title says it of the unpruned run): an
    ablation never reads like a pruning result."""
    if "audio_input" not in summary or not summary["audio_input"].isin(list(INPUT_LABELS)).any():
        return summary
    rows = summary.to_dict("records")
    return summary.assign(method=[r["method"] + ("" if r["method"] == BASELINE else input_label(r)) for r in rows])


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
    return f"{task}{input_label(first)} ({metric}; {samples} samples): {unpruned}"


def headline_text(summary: pd.DataFrame) -> str:
    """Plain text for the terminal: per task, a line of ratios, then per method its scores and,
    below them, its prefill speedups."""
    summary = input_labelled(summary)
    models = summary["model"].nunique() > 1
    lines = []
    for model, task, rows, baseline in _tasks(summary):
        ratios = sorted(rows["ratio"].unique())
        name = f"{model} / {task}" if models else task
        lines.append(_title(name, rows, baseline))
        label_width = max([len("prefill") + 2, *(len(m) for m in rows["method"])]) + 1
        width = max([7, *(len(row_speedup(row)) + 2 for row in rows.to_dict("records"))])
        lines.append(f"  {'ratio':<{label_width}}{'':9}" + "".join(f"{ratio_text(r):>{width}}" for r in ratios))
        for method, group in rows.groupby("method", sort=True):
            at = {r: row for r, row in zip(group["ratio"], group.to_dict("records"))}
            scores = "".join(f"{score_text(at[r]['score']) if r in at else '':>{width}}" for r in ratios)
            speed = "".join(f"{row_speedup(at[r]) if r in at else '':>{width}}" for r in ratios)
            lines.append(f"  {method:<{label_width}}{'score':9}{scores}")
            lines.append(f"  {'':<{label_width}}{'prefill':9}{speed}")
        lines.append("")
    lines += _legends(summary)
    return "\n".join(lines).rstrip() + "\n"


def headline_markdown(summary: pd.DataFrame) -> str:
    """The same as Markdown: per task a table of methods x ratios, each cell 'score (speedup)'."""
    summary = input_labelled(summary)
    models = summary["model"].nunique() > 1
    parts = []
    for model, task, rows, baseline in _tasks(summary):
        ratios = sorted(rows["ratio"].unique())
        name = f"{model} / {task}" if models else task
        table = []
        for method, group in rows.groupby("method", sort=True):
            at = {r: row for r, row in zip(group["ratio"], group.to_dict("records"))}
            table.append([method] + [f"{score_text(at[r]['score'])} ({row_speedup(at[r])})" if r in at else "" for r in ratios])
        header = ["method", *(f"ratio {ratio_text(r)}" for r in ratios)]
        parts.append(f"**{_title(name, rows, baseline)}**\n\n" + markdown_table(header, table) + "\n")
    legend = " ".join(["Each cell: score (prefill speedup against the unpruned run).", *(f"{note}." for note in _legends(summary))])
    return "\n".join(parts) + "\n" + legend + "\n"


def _legends(summary: pd.DataFrame) -> list[str]:
    """The notes the marks in a table need: within the noise, nothing pruned."""
    marked = [(NOISE_NOTE, "prefill_within_noise"), (NOTHING_PRUNED_NOTE, "nothing_pruned")]
    return [note for note, column in marked if column in summary and bool(summary[column].eq(True).any())]


def noise_share(summary: pd.DataFrame) -> float:
    """The fraction of pruned runs with a prefill speedup whose speedup is within the timing noise
    (NaN when none has one: nothing was timed)."""
    pruned = summary[(summary["method"] != BASELINE) & summary["prefill_speedup"].notna()]  # those with a speedup
    if "nothing_pruned" in pruned:
        pruned = pruned[~pruned["nothing_pruned"].eq(True)]
    if "prefill_within_noise" not in pruned or not len(pruned):
        return math.nan
    return float(pruned["prefill_within_noise"].eq(True).mean())
