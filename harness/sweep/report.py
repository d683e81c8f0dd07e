"""The outputs of a sweep folder: ``summary.csv``, ``breakdown.csv`` (when a task breaks its scores
down or a suite aggregates them), the plots, and ``report.md`` (where it ran, then per model the task
average, per task every method x ratio against the unpruned baseline, and the breakdowns)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .config import BASELINE
from .breakdown import breakdown_folder, report_sections
from .plots import plot_summary, slug
from .store import read_runs, recorded_tasks
from .summary import direction, summarize_folder, task_averages


def write_outputs(out_dir: Path, plots: bool = True) -> list[Path]:
    """Write ``summary.csv``, the plots (unless ``plots`` is False) and ``report.md`` from the results
    in ``out_dir``; returns the paths of the results and of what was written."""
    summary = summarize_folder(out_dir)
    summary_path = out_dir / "summary.csv"
    summary.to_csv(summary_path, index=False)
    written = [out_dir / "results.jsonl", summary_path]
    breakdown = breakdown_folder(out_dir, summary)
    if not breakdown.empty:
        breakdown.to_csv(out_dir / "breakdown.csv", index=False)
        written.append(out_dir / "breakdown.csv")
    if plots:
        written += plot_summary(summary, out_dir)
    written.append(write_report(summary, out_dir, breakdown))
    return [p for p in written if p.exists()]


def _table(frame: pd.DataFrame, columns: dict[str, str]) -> str:
    """A markdown table of ``frame`` with columns renamed; numbers rounded for reading."""
    shown = frame[list(columns)].rename(columns=columns)
    header = "| " + " | ".join(shown.columns) + " |\n|" + "---|" * len(shown.columns) + "\n"
    lines = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    return header + "\n".join(lines) + "\n"


def _cell(value) -> str:
    if isinstance(value, float):
        return "—" if pd.isna(value) else f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return "—" if value is None else str(value)


def _provenance(out_dir: Path) -> str:
    runs = read_runs(out_dir)
    if not runs:
        return ""
    lines = [
        f"- {r['time']}: {r['model']} on {r['device']} ({r['encoder']} audio encoder), "
        + ", ".join(f"{k} {v}" for k, v in r["versions"].items())
        for r in runs
    ]
    return "Runs (each start or resume of a model):\n\n" + "\n".join(lines) + "\n"


TASK_COLUMNS = {
    "method": "method", "ratio": "ratio", "score": "score", "score_change": "Δ score", "kept_tokens": "audio tokens kept",
    "prefill_ms_median": "prefill ms", "prefill_speedup": "prefill ×", "decode_ms_per_token_median": "decode ms/token",
    "kv_held_mib_median": "KV MiB", "kv_saved": "KV saved", "cache": "cache", "errors": "errors", "samples": "samples",
}
AVERAGE_COLUMNS = {"method": "method", "ratio": "ratio", "score": "mean score", "tasks": "tasks", "prefill_speedup": "mean prefill ×"}


def write_report(summary: pd.DataFrame, out_dir: Path, breakdown: pd.DataFrame | None = None) -> Path:
    """Write ``report.md`` next to the results (with ``breakdown``, a ``breakdown_folder`` table, its
    sections); returns its path."""
    parts = [f"# kvprune sweep: {out_dir.name}\n", _provenance(out_dir),
             "Scores are each task's primary metric (0-100); Δ is against the unpruned baseline; timings are medians "
             "over samples that ran, the warm-up and calls that compiled excluded; prefill × is the baseline's prefill time over "
             "this run's; KV is the cache held after the prefill (a static cache's room for new tokens left out).\n"]
    for model, frame in summary.groupby("model"):
        parts.append(f"## {model}\n")
        parts.append(f"![score vs ratio]({slug(model)}_score_vs_ratio.png)\n![score vs prefill]({slug(model)}_score_vs_prefill.png)\n"
                     f"![KV saved]({slug(model)}_kv_saved.png)\n")
        if frame["task"].nunique() > 1:
            for title, rows in task_averages(frame):
                parts.append(f"### {title}\n\n" + _table(_ordered(rows), AVERAGE_COLUMNS))
        for task, rows in frame.groupby("task"):
            metric = rows["metric"].iloc[0] + ("" if rows["higher_is_better"].iloc[0] else f", {direction(False)}")
            parts.append(f"### {task} ({metric})\n\n" + _table(_ordered(rows), TASK_COLUMNS))
        if breakdown is not None:
            tasks = {name: task for name, task in recorded_tasks(out_dir).items() if name in set(frame["task"])}
            parts += report_sections(breakdown, tasks, model)
    path = out_dir / "report.md"
    path.write_text("\n".join(parts))
    return path


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """The baseline first, then methods by name and ratios ascending."""
    return frame.assign(_base=frame["method"] != BASELINE).sort_values(["_base", "method", "ratio"]).drop(columns="_base")
