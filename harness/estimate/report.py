"""``estimate.csv`` and ``estimate.md``: per task and way of running it, the samples, what they rest on
and what they cost (median, with the fastest and slowest repeats beside it), what a sweep pays once,
the totals and how the ways compare (with and without LibriSpeech, whose long answers weigh most)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..markdown import markdown_table
from .config import MODES
from .report_rows import FIXED, TOTAL

MODE_WORDS = {
    "batch1": "kvprune, one sample per call (fast encoder, generation engine, nothing shared)",
    "sweep": "kvprune with the sweep's batching and sharing (timing subset included)",
    "audiomarathon": "AudioMarathon's way (stock encoder, stock generate on its dynamic cache, one sample per call)",
}
LONG_ANSWERS = "librispeech"  # the task whose transcripts make most of the one-at-a-time decoding
TIMED_FILE = "timed.csv"
TIMED_COLUMNS = ["kind", "task", "mode", "unit", "repeat", "run", "rows", "seconds", "prefill_s", "decode_s", "compiled",
                 "captured", "first", "longest_prompt", "generated", "audio_seconds", "runs", "between_runs", "host_loop_ns"]


def totals(table: pd.DataFrame, leave_out: str | None = None) -> dict[str, float]:
    """Hours per mode over every task and the fixed costs (``leave_out``: without that task)."""
    rows = table[~table["task"].isin([TOTAL, leave_out])]
    return {mode: float(rows.loc[rows["mode"] == mode, "gpu_hours"].sum()) for mode in MODES if (rows["mode"] == mode).any()}


def write_estimate(table: pd.DataFrame, out: Path, command: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "estimate.csv"
    table.to_csv(csv, index=False)
    modes = [mode for mode in MODES if (table["mode"] == mode).any()]
    lines = ["# kvprune estimate\n", f"- command: `{command}`", f"- device: {', '.join(map(str, table['device'].dropna().unique()))}"]
    lines += [f"- {mode}: {MODE_WORDS[mode]}" for mode in modes]
    tasks = table[~table["task"].isin([TOTAL, FIXED])]
    rows = []
    for task, group in table[table["task"] != TOTAL].groupby("task", sort=False):
        by_mode, first = group.set_index("mode"), group.iloc[0]
        described = [f"{first['samples']}", first.get("audio_seconds", ""), f"{first.get('answer_tokens', '')}"]
        rows.append([task, *(["", "", ""] if task == FIXED else described), *[_cell(by_mode.loc[m]) for m in modes]])
    hours = totals(table)
    rows.append([TOTAL, f"{int(tasks.drop_duplicates('task')['samples'].sum())}", "", "",
                 *[f"{hours[m]:.3f} h" for m in modes]])
    lines += ["", "Seconds per sample-run / hours in all (median; fastest-slowest repeats in brackets):", "",
              markdown_table(["task", "samples", "audio s", "answer tokens", *modes], rows), ""]
    lines += _comparison(table, modes)
    lines += ["", "Where the time goes (prefill includes the audio encoder; h = hours):", "", _where_time_goes(table, modes)]
    fixed = table[(table["task"] == FIXED)].drop_duplicates("task")
    if not fixed.empty:
        lines += ["", f"Paid once per sweep, in every way: {fixed.iloc[0]['note']}."]
    sources = tasks.drop_duplicates("task")[["task", "samples_source", "answer_source", "timed", "note"]]
    lines += ["", "Sizes, answer lengths and what was timed (sweep):", ""]
    lines += [f"- {r.task}: samples from {r.samples_source}; answer length: {r.answer_source}; timed: "
              f"{tasks[(tasks['task'] == r.task) & (tasks['mode'] == 'sweep')]['timed'].iloc[0]}" for r in sources.itertuples()]
    calls = tasks.groupby("call", sort=True)
    for call, group in calls:
        record = json.loads(group.iloc[-1]["compile_record"])
        where = f" (call {int(call)}: {', '.join(group['task'].unique())})" if len(calls) > 1 else ""
        lines += ["", f"What decoding compiled while timing{where}: " + ", ".join(f"{k} {v}" for k, v in record.items())]
    md = out / "estimate.md"
    md.write_text("\n".join(lines) + "\n")
    return [csv, md]


def _cell(row: pd.Series) -> str:
    spread = f" ({row['seconds_low'] / 3600:.3f}-{row['seconds_high'] / 3600:.3f})"
    per_run = f"{row['seconds_per_sample_run']:.4f} s / " if row["sample_runs"] else ""
    return f"{per_run}{row['gpu_hours']:.3f} h{spread}"


def _comparison(table: pd.DataFrame, modes: list[str]) -> list[str]:
    lines = []
    for leave_out, words in ((None, "all tasks"), (LONG_ANSWERS, f"without {LONG_ANSWERS}")):
        if leave_out is not None and leave_out not in set(table["task"]):
            continue
        hours = totals(table, leave_out)
        if hours.get("sweep", 0) <= 0:
            continue
        ratios = [_against(hours[m] / hours["sweep"], "kvprune one sample at a time" if m == "batch1" else "AudioMarathon's way")
                  for m in modes if m != "sweep"]
        if ratios:
            lines.append(f"- {words}: the sweep's settings take " + ", and ".join(ratios) + f" ({hours['sweep']:.3f} h).")
    return lines


def _against(ratio: float, other: str) -> str:
    """The sweep's hours against another way's, in words that read right either way round."""
    if ratio >= 1:
        return f"{ratio:.2f}x fewer hours than {other}"
    return f"{1 / ratio:.2f}x more hours than {other} (where fixed costs dominate, one sample at a time is cheaper)"


def _where_time_goes(table: pd.DataFrame, modes: list[str]) -> str:
    """Per task and in total, each mode's hours as prefill + decoding (+ timing subset, batches' own work, once)."""
    rows = []
    for task, group in table[table["task"] != FIXED].groupby("task", sort=False):
        by_mode = group.set_index("mode")
        cells = []
        for mode in modes:
            row = by_mode.loc[mode]
            cell = f"{row['prefill_hours']:.3f} + {row['decode_hours']:.3f}"
            for column, word in (("timing_subset_hours", "timing"), ("overhead_hours", "batches' own"),
                                 ("once_hours", "once")):
                if row[column] > 0:
                    cell += f" + {row[column]:.3f} {word}"
            cells.append(cell)
        rows.append([task, *cells])
    return markdown_table(["task", *(f"{mode}: prefill + decode h" for mode in modes)], rows)


def append_timed(out: Path, calls: list, units: list) -> Path:
    """Every generation call and batch the estimate timed for one task (``timing.Call``, ``timing.Unit``), one
    row each (``kind``: call or batch), appended to ``timed.csv``: what each figure rests on, repeat by repeat,
    so that an estimate that misses its sweep can be taken apart (which call, which repeat, compiled or not)."""
    rows = [dict(kind="call", **c.context, run=c.run, rows=c.rows, seconds=c.seconds, prefill_s=c.prefill_s,
                 decode_s=c.decode_s, compiled=c.compiled, captured=c.captured, first=c.first,
                 longest_prompt=max(c.prompt_tokens), generated=c.generated) for c in calls]
    rows += [dict(kind="batch", **u.context, rows=u.size, seconds=u.seconds, audio_seconds=u.audio_seconds, runs=u.runs,
                  between_runs=u.between_runs, host_loop_ns=u.host_loop_ns) for u in units]
    out.mkdir(parents=True, exist_ok=True)
    path = out / TIMED_FILE
    pd.DataFrame(rows, columns=TIMED_COLUMNS).to_csv(path, mode="a", header=not path.exists(), index=False)
    return path


def earlier_rows(out: Path, settings: str) -> pd.DataFrame | None:
    """The rows of an estimate already in ``out`` (an interrupted one resumes where it stopped), if it
    was made with the same settings; another estimate there is refused rather than mixed in."""
    path = out / "estimate.csv"
    if not path.exists():
        return None
    table = pd.read_csv(path)
    found = set(table.loc[~table["task"].isin([TOTAL, FIXED]), "settings"]) if "settings" in table else {None}
    if found != {settings}:
        raise ValueError(f"{path} holds an estimate made with other settings: pass another --out, or remove it "
                         "to start afresh (the same command resumes an interrupted estimate).")
    return table
