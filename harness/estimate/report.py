"""``estimate.csv`` and ``estimate.md``: per task and mode, the sample-runs, the seconds one costs and
the projected GPU-hours, then the totals and how the modes compare."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..markdown import markdown_table
from .measure import MODES

MODE_WORDS = {
    "batch1": "kvprune, one sample per call (fast encoder, generation engine, nothing shared)",
    "sweep": "kvprune with the sweep's batching and sharing (timing subset included)",
    "audiomarathon": "AudioMarathon's way (stock encoder, stock generate on its dynamic cache, one sample per call)",
}


def totals(table: pd.DataFrame) -> dict[str, float]:
    rows = table[table["task"] == "total"].set_index("mode")["gpu_hours"]
    return {mode: float(rows.get(mode, float("nan"))) for mode in MODES}


def write_estimate(table: pd.DataFrame, out: Path, command: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "estimate.csv"
    table.to_csv(csv, index=False)
    hours = totals(table)
    lines = [f"# kvprune estimate\n", f"- command: `{command}`", f"- device: {table.attrs.get('device', '?')}"]
    lines += [f"- {mode}: {MODE_WORDS[mode]}" for mode in MODES]
    tasks = table[table["task"] != "total"]
    rows = []
    for task, group in tasks.groupby("task", sort=False):
        by_mode = group.set_index("mode")
        first = group.iloc[0]
        rows.append([task, f"{first['samples']}", first["audio_seconds"], f"{int(first['answer_tokens'])}",
                     *[f"{by_mode.loc[m, 'seconds_per_sample_run']:.3f} s / {by_mode.loc[m, 'gpu_hours']:.2f} h" for m in MODES]])
    rows.append(["total", f"{int(tasks.drop_duplicates('task')['samples'].sum())}", "", "",
                 *[f"{hours[m]:.2f} h" for m in MODES]])
    lines += ["", markdown_table(["task", "samples", "audio s", "answer tokens", *MODES], rows), ""]
    if hours["sweep"] > 0:
        lines.append(f"The sweep's settings take {hours['batch1'] / hours['sweep']:.2f}x fewer GPU-hours than kvprune one "
                     f"sample at a time, and {hours['audiomarathon'] / hours['sweep']:.2f}x fewer than AudioMarathon's way.")
    lines += ["", "Where the GPU-hours go (prefill includes the audio encoder; h = GPU-hours):", "", _where_time_goes(table)]
    sources = tasks.drop_duplicates("task")[["task", "samples_source", "answer_source", "note"]]
    lines += ["", "Sizes and answer lengths:", ""]
    lines += [f"- {r.task}: samples from {r.samples_source}; answer length: {r.answer_source}" for r in sources.itertuples()]
    calls = tasks.groupby("call", sort=True)
    for call, group in calls:
        record = json.loads(group.iloc[-1]["compile_record"])
        where = f" (call {int(call)}: {', '.join(group['task'].unique())})" if len(calls) > 1 else ""
        lines += ["", f"What decoding compiled while timing{where}: " + ", ".join(f"{k} {v}" for k, v in record.items())]
    md = out / "estimate.md"
    md.write_text("\n".join(lines) + "\n")
    return [csv, md]


def _where_time_goes(table: pd.DataFrame) -> str:
    """Per task and in total, each mode's hours as prefill + decoding (+ the sweep's timing subset)."""
    rows = []
    for task, group in table.groupby("task", sort=False):
        by_mode = group.set_index("mode")
        cells = []
        for mode in MODES:
            row = by_mode.loc[mode]
            cell = f"{row['prefill_hours']:.2f} + {row['decode_hours']:.2f}"
            if row["timing_subset_hours"] > 0:
                cell += f" + {row['timing_subset_hours']:.2f} timing"
            cells.append(cell)
        rows.append([task, *cells])
    return markdown_table(["task", *(f"{mode}: prefill + decode h" for mode in MODES)], rows)


def earlier_rows(out: Path, settings: str) -> pd.DataFrame | None:
    """The rows of an estimate already in ``out`` (an interrupted one resumes where it stopped), if it
    was made with the same settings; another estimate there is refused rather than mixed in."""
    path = out / "estimate.csv"
    if not path.exists():
        return None
    table = pd.read_csv(path)
    found = set(table.loc[table["task"] != "total", "settings"]) if "settings" in table else {None}
    if found != {settings}:
        raise ValueError(f"{path} holds an estimate made with other settings: pass another --out, or remove it "
                         "to start afresh (the same command resumes an interrupted estimate).")
    return table
