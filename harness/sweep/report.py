"""The outputs of a sweep folder: ``summary.csv``, ``breakdown.csv`` (when a task breaks its scores
down or a suite aggregates them), the plots, and ``report.md``.

``report.md`` opens with what it leaves out (runs of the folder that earlier commands added:
``held``) and what went wrong, if anything (runs not done yet, runs that failed, audio that was
cut), then the headline (per task, the unpruned score and each method's score and prefill speedup
at each ratio), a word on whether the timings mean anything, where it ran, and per model the
figures, the task average, one table per task (with the KV cache each run held and saved) and the
breakdowns.
Columns have plain names and every number of a kind has one format (``headline``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..markdown import markdown_table
from .batching_report import batching_section
from .received import input_banners
from .analyses import plot_duration, plot_radar
from .breakdown import breakdown_table, report_sections
from .config import BASELINE
from .held import other_runs, other_runs_banner
from .headline import headline_markdown, input_label, input_labelled, noise_share, ratio_text, row_speedup, score_text
from .identity import SweepPlan, read_plan
from .judging import judge_section, judge_spec
from .plots import plot_summary, slug
from .store import read_rows, read_log, recorded_tasks
from .summary import direction, failure_effect, failures, select_results, summarize, task_averages


@dataclass
class Outputs:
    """What ``write_outputs`` wrote and read, for a caller that prints from it without reading again."""

    paths: list[Path]  # the results files and what was written
    results: pd.DataFrame
    summary: pd.DataFrame
    others: pd.DataFrame | None  # the folder's runs the summary leaves out (None: it covers everything)
    tasks: dict  # the tasks as the sweep ran them (``recorded_tasks``)


def write_outputs(out_dir: Path, plots: bool = True, everything: bool = False) -> Outputs:
    """Write ``summary.csv``, the plots (unless ``plots`` is False) and ``report.md`` from the results
    in ``out_dir`` (the runs its last sweep asked for, or ``everything``)."""
    rows, recorded_plan = read_rows(out_dir), read_plan(out_dir)  # read once: the results, then the other runs
    results = select_results(out_dir, rows, recorded_plan, everything)
    tasks = recorded_tasks(out_dir)
    summary = summarize(results, tasks)
    summary_path = out_dir / "summary.csv"
    summary.to_csv(summary_path, index=False)
    written = sorted(out_dir.glob("results*.jsonl")) + [summary_path]
    breakdown = breakdown_table(results, tasks, summary)
    if not breakdown.empty:
        breakdown.to_csv(out_dir / "breakdown.csv", index=False)
        written.append(out_dir / "breakdown.csv")
    if plots:
        written += plot_summary(summary, out_dir) + plot_duration(breakdown, out_dir) + plot_radar(summary, out_dir, tasks)
    plan = None if everything else recorded_plan
    others = other_runs(out_dir, rows, plan) if plan is not None else None
    written.append(write_report(summary, out_dir, results, breakdown=breakdown, plan=plan, others=others, figures_drawn=plots))
    return Outputs([p for p in written if p.exists()], results, summary, others, tasks)


def _number(digits: int) -> Callable:
    return lambda value: "—" if pd.isna(value) else f"{value:.{digits}f}"


def _signed(value) -> str:
    return "—" if pd.isna(value) else f"{value:+.1f}"


def _percent(value) -> str:
    return "—" if pd.isna(value) else f"{100 * value:.0f}%"


def _text(value) -> str:
    return "—" if value is None or pd.isna(value) else str(value)


def _count(value) -> str:
    return "—" if pd.isna(value) else f"{value:.0f}"


#: column -> (title, format) of the per-task tables and of the task averages
TASK_COLUMNS = {
    "method": ("method", str), "ratio": ("ratio", ratio_text), "score": ("score", score_text),
    "score_change": ("change vs unpruned", _signed), "kept_tokens": ("audio tokens kept (mean)", _count),
    "prefill_ms_median": ("prefill ms (median)", _number(1)), "prefill_speedup": ("prefill speedup", None),
    "decode_ms_per_token_median": ("decode ms per token (median)", _number(1)),
    "kv_held_mib_median": ("KV cache held after prefill, MiB (median)", _number(2)),
    "kv_saved": ("KV cache saved after prefill", _percent), "cache": ("decoding cache", _text),
    "errors": ("failed runs", _count), "samples": ("samples", _count),
}
VIDEO_COLUMN = {"kept_video_tokens": ("video tokens kept (mean; frames and images)", _count)}


def _task_columns(rows: pd.DataFrame) -> dict:
    """The task table's columns: the kept video tokens beside the kept audio tokens, for a task whose
    prompts hold video or images."""
    if "video_tokens" not in rows or not rows["video_tokens"].fillna(0).gt(0).any():
        return TASK_COLUMNS
    columns = list(TASK_COLUMNS.items())
    at = [name for name, _ in columns].index("kept_tokens") + 1
    return dict(columns[:at] + list(VIDEO_COLUMN.items()) + columns[at:])


AVERAGE_COLUMNS = {
    "method": ("method", str), "ratio": ("ratio", ratio_text), "score": ("mean score", score_text),
    "tasks": ("tasks", _count), "prefill_speedup": ("mean prefill speedup", None),
}


def _table(frame: pd.DataFrame, columns: dict) -> str:
    """A markdown table of ``frame``'s ``columns`` under their titles, each in its format (speedups
    marked when within the timing noise)."""
    rows = (
        [row_speedup(row, name) if form is None else form(row.get(name))
         for name, (_, form) in columns.items()]
        for row in frame.to_dict("records")
    )
    return markdown_table([title for title, _ in columns.values()], rows) + "\n"


def _provenance(out_dir: Path) -> str:
    runs = read_log(out_dir)
    if not runs:
        return ""
    lines = [
        f"- {r['time']}: {r['model']} on {r['device']} ({r['encoder']} audio encoder), "
        + ", ".join(f"{k} {v}" for k, v in r["versions"].items())
        for r in runs
    ]
    return "## Where it ran\n\nEach start or resume of a model:\n\n" + "\n".join(lines) + "\n"


def dry_run_banner(out_dir: Path) -> str:
    """What a dry run's folder holds (``kvprune sweep --preset``): timings, memory and compilation of a
    model with random weights, whose scores mean nothing."""
    dry = sorted({run["dry_run"] for run in read_log(out_dir) if run.get("dry_run")})
    if not dry:
        return ""
    return (f"> **Dry run**: {'; '.join(dry)}. Timings, memory and what compiled are the sweep's at that shape; the "
            "scores below are meaningless (random weights).\n")


def failure_banner(results: pd.DataFrame, tasks: dict | None = None) -> str:
    """A warning block listing failed runs by kind and saying what the scores make of them (by each
    task's primary metric), or nothing when every run succeeded."""
    failed, total, kinds = failures(results)
    if not failed:
        return ""
    listed = "\n".join(f"> - {count} × {example}" for count, example in kinds)
    return (f"> **Warning: {failed} of {total} runs failed.** {failure_effect(results, tasks)} "
            "The `error` field of results.jsonl has every message; rerunning the sweep with `--retry-errors` reruns them.\n>\n"
            f"{listed}\n")


def incomplete_banner(plan: SweepPlan, results: pd.DataFrame) -> str:
    """A warning when runs the folder's last sweep asked for have no result yet (it was interrupted):
    until they do, a method may be scored on fewer samples than the unpruned run."""
    gaps = plan.gaps(zip(results["model"], results["task"]))
    if not gaps:
        return ""
    missing = sum(planned - done for done, planned in gaps.values())
    lines = [f"> **Incomplete: {missing} of the runs the last sweep asked for have no result yet**, so scores may "
             "compare methods over different samples. Rerun the same `kvprune sweep` command to finish them.\n>"]
    lines += [f"> - {model} / {task}: {done} of {planned} runs" for (model, task), (done, planned) in sorted(gaps.items())]
    return "\n".join(lines) + "\n"


def timing_note(summary: pd.DataFrame) -> str:
    share = noise_share(summary)
    if pd.isna(share):
        return ""
    if share >= 0.5:
        return (f"**Timings are noise-level here**: {share:.0%} of the pruned runs' prefill speedups are within the "
                "timing noise (marked ~). Scores are what this sweep measures; for speed, time real model shapes on a "
                "GPU with `kvprune bench`.\n")
    return f"{share:.0%} of the pruned runs' prefill speedups are within the timing noise (marked ~).\n"


def write_report(summary: pd.DataFrame, out_dir: Path, results: pd.DataFrame | None = None, *,
                 breakdown: pd.DataFrame | None = None, plan: SweepPlan | None = None,
                 others: pd.DataFrame | None = None, figures_drawn: bool = True) -> Path:
    """Write ``report.md`` next to the results (with ``results``, the banners, and with the folder's
    ``plan`` too, whether runs are missing; with ``breakdown``, a ``breakdown_table``, its sections),
    linking the figures the folder holds (``figures_drawn``: whether they were drawn from these
    results just before; if not, the report says they are as last drawn); returns its path."""
    parts = [f"# kvprune sweep: {out_dir.name}\n", dry_run_banner(out_dir)]
    tasks = recorded_tasks(out_dir)
    if results is not None:
        planned = (other_runs_banner(out_dir, others), incomplete_banner(plan, results)) if plan is not None else ()
        banners = (*planned, failure_banner(results, tasks), *input_banners(results))
        parts += [banner for banner in banners if banner]
    parts += ["## Headline\n", headline_markdown(summary), timing_note(summary), batching_section(summary, results, out_dir),
              _provenance(out_dir), judge_section(out_dir),
              "## Details\n\nScores are each task's primary metric (0-100); the change is against the unpruned run of "
              "the same task; timings are medians over the runs that succeeded, the first run (a warm-up) and calls "
              "that compiled left out; the prefill speedup is the unpruned run's median prefill time over this run's; "
              "the KV cache held is measured right after prefill (a static cache's room for new tokens left out), and "
              "the share saved is against the unpruned run's.\n"]
    for model, frame in summary.groupby("model"):
        parts.append(f"### {model}\n")
        parts += _figures(out_dir, model, figures_drawn)
        if frame["task"].nunique() > 1:
            for title, rows in task_averages(frame):
                parts.append(f"#### {title}\n\n" + _table(_ordered(rows), AVERAGE_COLUMNS))
        for task, rows in frame.groupby("task"):
            metric = rows["metric"].iloc[0] + ("" if rows["higher_is_better"].iloc[0] else f", {direction(False)}")
            label = input_label(rows.iloc[0].to_dict())
            parts.append(f"#### {task}{label} ({metric})\n\n" + _table(input_labelled(_ordered(rows)), _task_columns(rows)))
        if breakdown is not None:
            ran = {name: t for name, t in tasks.items() if name in set(frame["task"])}
            parts += report_sections(breakdown, ran, model, judge_spec(out_dir))
    path = out_dir / "report.md"
    path.write_text("\n".join(p for p in parts if p))
    return path


FIGURES = (("score vs ratio", "score_vs_ratio"), ("score vs prefill", "score_vs_prefill"), ("KV saved", "kv_saved"))


def _figures(out_dir: Path, model: str, drawn: bool) -> list[str]:
    """Links to the model's figures that exist (none after ``--no-plots`` on a new folder), with a
    word when they were not drawn from these results (``kvprune plot`` draws them again)."""
    stem = slug(model)
    paths = [(title, out_dir / f"{stem}_{name}.png") for title, name in FIGURES]
    paths += [(path.stem, path) for path in sorted(out_dir.glob(f"{stem}_*radar.png")) + sorted(out_dir.glob(f"{stem}_*_duration.png"))]
    links = [f"![{title}]({path.name})" for title, path in paths if path.is_file()]
    if not links:
        return []
    stale = "" if drawn else (f"Figures as they were last drawn, not from this report's run: `kvprune plot {out_dir}` draws "
                              "them again from these results.\n\n")
    return [stale + "\n".join(links) + "\n"]


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """The baseline first, then methods by name and ratios ascending."""
    return frame.assign(_base=frame["method"] != BASELINE).sort_values(["_base", "method", "ratio"]).drop(columns="_base")
