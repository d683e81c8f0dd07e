"""A sweep folder on disk: ``results.jsonl``, one JSON line per finished sample and run (a
``rows.ResultRow``), and the sweep's log, ``runs.jsonl``: one line per model each start or resume
loads, saying where it ran and with which task configs (and lines of other ``kind``: each task's time,
what the engine compiled).

A result line is written and flushed the moment its sample is done, so an interrupted sweep loses at
most the sample in flight; a rerun reads the lines back and skips every run whose key is present.
A line cut short by a kill (or by a full disk) is dropped when the file is next appended to; any
other unreadable line is skipped with a warning that names the file and the line (once per
command), and the rest is read; the next sweep on the folder moves such lines to
``<file>.unreadable`` and says so, once. Each process of a multi-GPU sweep appends to its own file
(``results.rank<N>.jsonl``). The task configs recorded in
``runs.jsonl`` let a summary read results whose task was since renamed or edited.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace
from pathlib import Path

import pandas as pd

from ..judge.errors import judge_error_names
from ..tasks.task import Task, task_from_config
from .disk import ResultsFileWarning, cannot_write, write_line
from .identity import DIGESTS_FILE, PLAN_FILE
from .rows import ResultRow, RunKey, results_frame

RUNS_FILE = "runs.jsonl"
JUDGE_ERRORS = judge_error_names()
#: what ``--overwrite`` removes: the files a sweep writes (other files in the folder stay)
OUTPUT_PATTERNS = ("results*.jsonl", "results*.jsonl.unreadable", RUNS_FILE, PLAN_FILE, DIGESTS_FILE, "summary.csv",
                   "breakdown.csv", "report.md", "judge.jsonl", "*_score_vs_ratio.png", "*_score_vs_prefill.png",
                   "*_kv_saved.png")


def judge_failed(row: ResultRow) -> bool:
    """Whether a row holds an output whose grading failed because the judge did (an error of
    ``harness.judge``): grading it again needs the judge, not the model."""
    return row.output is not None and isinstance(row.error, str) and row.error.partition(":")[0] in JUDGE_ERRORS


def unique_runs(rows: list[ResultRow]) -> list[ResultRow]:
    """One row per run: where a run was recorded twice (an error, then its retry), the last
    successful one, else the last."""
    chosen: dict[RunKey, ResultRow] = {}
    for row in rows:
        if row.key not in chosen or not row.error or chosen[row.key].error:
            chosen[row.key] = row
    return list(chosen.values())


def results_files(out_dir: Path) -> list[Path]:
    return sorted(Path(out_dir).glob("results*.jsonl"))


def _json_lines(path: Path) -> list[dict]:
    """Every readable line of a JSON-lines file; each unreadable one is skipped with a warning
    naming the file and the line (a last line cut short by a kill is expected after a crash)."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            row, problem = _parsed(line)
            if problem:
                warnings.warn(f"{path}, line {number}: {problem}; skipped, the other lines are read. Rerunning the sweep "
                              "redoes a skipped result.", ResultsFileWarning, stacklevel=2)
            elif row is not None:
                rows.append(row)
    return rows


def _parsed(line: str) -> tuple[dict | None, str | None]:
    """(the row of one line, None) or (None, what is wrong with it); (None, None) for a blank line."""
    if not line.strip():
        return None, None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        cut = "" if line.endswith("\n") else " (cut short: a sweep killed while writing it?)"
        return None, f"not a JSON object{cut} ({error.msg})"
    return (row, None) if isinstance(row, dict) else (None, "not a JSON object")


def read_rows(out_dir: Path) -> list[ResultRow]:
    """The row of every complete line of every results file."""
    return [ResultRow.from_json(line) for path in results_files(out_dir) for line in _json_lines(path)]


def append_log_line(out_dir: Path, info: dict) -> None:
    """Append one line to the sweep's log, ``runs.jsonl`` (paths and method specs written as text)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RUNS_FILE
    _drop_cut_line(path)
    try:
        with open(path, "ab", buffering=0) as handle:
            write_line(handle, json.dumps(info, default=str) + "\n")
    except OSError as error:
        raise cannot_write(path, error, "the results so far are kept") from None


def clear_outputs(out_dir: Path) -> list[Path]:
    """Remove what sweeps wrote in ``out_dir`` (``--overwrite``); returns what was removed."""
    removed = [path for pattern in OUTPUT_PATTERNS for path in sorted(Path(out_dir).glob(pattern))]
    for path in removed:
        path.unlink()
    return removed


TIMING_PASS = "timing"  # the ``pass`` of a timing subset's rows: samples run alone, unshared, for their timings
ENGINE_RECORD = "engine"  # the ``kind`` of a runs.jsonl line recording what decoding compiled for a model
TASK_TIME_RECORD = "time"  # the ``kind`` of a runs.jsonl line recording the seconds a model's loading or a task took


def read_log(out_dir: Path | str, kind: str | None = None) -> list[dict]:
    """The lines of the sweep's log, ``runs.jsonl``, oldest first (none for a folder without one): those
    recording each model a sweep loaded (where it ran, the versions, its tasks' configs); ``kind="engine"``:
    instead, those recording what the generation engine compiled and kept for each model;
    ``kind="time"``: the seconds each model's loading and each task took."""
    path = Path(out_dir) / RUNS_FILE
    lines = _json_lines(path) if path.exists() else []
    return [line for line in lines if line.get("kind") == kind]


def recorded_tasks(out_dir: Path | str) -> dict[str, Task]:
    """The tasks as the sweep ran them: each task name's latest config in ``runs.jsonl``."""
    configs: dict[str, dict] = {}
    for run in read_log(out_dir):
        configs.update(run.get("tasks", {}))
    return {name: task_from_config(config, source=f"{Path(out_dir) / RUNS_FILE}, task {name}") for name, config in configs.items()}


def read_results(out_dir: Path | str) -> pd.DataFrame:
    """All results of a sweep folder as a table (one row per sample and run)."""
    rows = read_rows(Path(out_dir))
    if not rows:
        raise FileNotFoundError(f"no results in {out_dir}: expected results*.jsonl written by `kvprune sweep`")
    return results_frame(rows)


class ResultStore:
    """Appends result lines to one file and knows which runs are already done. Every line is one
    unbuffered write: a write that fails (a full disk) raises ``SweepOutputError`` at once, and
    ``close`` has nothing left to write."""

    def __init__(self, out_dir: Path, rank: int = 0, world_size: int = 1, started: str | None = None):
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir
        self.path = out_dir / ("results.jsonl" if world_size == 1 else f"results.rank{rank}.jsonl")
        self.started = started  # the start that writes: a row gets it unless it has its own
        self.written = 0  # lines appended by this store
        self._handle = None

    def done_keys(self, retry_errors: bool = False) -> set[RunKey]:
        """The keys of the runs recorded; with ``retry_errors``, not those that failed, but for runs
        whose grading the judge failed: they are graded again from their outputs, not generated again
        (``rescore.regrade_judge_failures``)."""
        return {r.key for r in read_rows(self.out_dir) if not (retry_errors and r.error and not judge_failed(r))}

    def append(self, row: ResultRow) -> None:
        if row.started is None and self.started is not None:
            row = replace(row, started=self.started)
        try:
            if self._handle is None:
                _drop_cut_line(self.path)
                self._handle = open(self.path, "ab", buffering=0)
            write_line(self._handle, json.dumps(row.to_json(), ensure_ascii=False) + "\n")
        except OSError as error:
            self.close()
            raise cannot_write(self.path, error, f"the {self.written} rows this sweep wrote before are kept, and a line "
                               "it could not finish is dropped when the sweep resumes") from None
        self.written += 1

    def set_aside_unreadable(self) -> str | None:
        """Drop a last line cut short (a kill or a full disk while writing it: the run it was runs
        again) and move the other lines of this store's file that are not results to
        ``<file>.unreadable``, numbered as they were; says what was moved."""
        if not self.path.exists():
            return None
        try:
            _drop_cut_line(self.path)
        except OSError as error:
            raise cannot_write(self.path, error, "its whole lines are kept") from None
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        bad = {n for n, line in enumerate(lines, start=1) if _parsed(line)[1] and line.endswith("\n")}
        if not bad:
            return None
        aside = self.path.with_name(self.path.name + ".unreadable")
        try:
            with open(aside, "a", encoding="utf-8") as handle:
                handle.writelines(f"line {n}: {lines[n - 1]}" for n in sorted(bad))
            kept = self.path.with_name(f".{self.path.name}.tmp")
            kept.write_text("".join(line for n, line in enumerate(lines, start=1) if n not in bad), encoding="utf-8")
            os.replace(kept, self.path)
        except OSError as error:
            raise cannot_write(aside, error, f"{self.path} is unchanged") from None
        numbers = ", ".join(map(str, sorted(bad)))
        return (f"{self.path.name}: line{'s' if len(bad) > 1 else ''} {numbers} held no result (not a JSON object) and "
                f"{'were' if len(bad) > 1 else 'was'} moved to {aside.name}; a run such a line held runs again.")

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            try:
                handle.close()
            except OSError:  # unbuffered: nothing was left to write
                pass


def _drop_cut_line(path: Path) -> None:
    """A kill mid-write leaves a partial last line, which can never be read: remove it, so that the
    next line starts on its own and the file holds only whole lines."""
    if not path.exists() or not path.stat().st_size:
        return
    with open(path, "rb+") as handle:
        end = handle.seek(0, 2)
        position = end
        while position > 0:  # back from the end, a block at a time, to the last newline
            start = max(0, position - 65536)
            handle.seek(start)
            block = handle.read(position - start)
            if position == end and block.endswith(b"\n"):
                return
            newline = block.rfind(b"\n")
            if newline >= 0:
                handle.truncate(start + newline + 1)
                return
            position = start
        handle.truncate(0)
