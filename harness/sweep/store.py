"""A sweep folder on disk: ``results.jsonl``, one JSON line per finished sample, and ``runs.jsonl``,
one line per model run (each start or resume), saying where it ran and with which task configs.

A result line is written and flushed the moment its sample is done, so an interrupted sweep loses at
most the sample in flight; a rerun reads the lines back and skips every run whose key is present.
Each process of a multi-GPU sweep appends to its own file (``results.rank<N>.jsonl``). The task
configs recorded in ``runs.jsonl`` let a summary read results whose task was since renamed or edited.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..tasks.task import Task, task_from_config

RUNS_FILE = "runs.jsonl"
KEY_FIELDS = ("model", "task", "method", "ratio", "layer", "sample_id", "prompt_hash")


def run_key(row: dict) -> tuple:
    return tuple(round(row[k], 6) if k == "ratio" else row[k] for k in KEY_FIELDS)


def results_files(out_dir: Path) -> list[Path]:
    return sorted(Path(out_dir).glob("results*.jsonl"))


def _json_lines(path: Path) -> list[dict]:
    """Every complete line of a JSON-lines file; a line cut short by a kill is ignored."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def read_rows(out_dir: Path) -> list[dict]:
    """Every complete line of every results file."""
    return [row for path in results_files(out_dir) for row in _json_lines(path)]


def append_run(out_dir: Path, info: dict) -> None:
    """Append one model run's line to ``runs.jsonl`` (paths and method specs written as text)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / RUNS_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(info, default=str) + "\n")


def read_runs(out_dir: Path | str) -> list[dict]:
    """The lines of ``runs.jsonl``, oldest first (none for a folder without one)."""
    path = Path(out_dir) / RUNS_FILE
    return _json_lines(path) if path.exists() else []


def recorded_tasks(out_dir: Path | str) -> dict[str, Task]:
    """The tasks as the sweep ran them: each task name's latest config in ``runs.jsonl``."""
    configs: dict[str, dict] = {}
    for run in read_runs(out_dir):
        configs.update(run.get("tasks", {}))
    return {name: task_from_config(config, source=f"{Path(out_dir) / RUNS_FILE}, task {name}") for name, config in configs.items()}


def read_results(out_dir: Path | str) -> pd.DataFrame:
    """All results of a sweep folder as a table (one row per sample and run)."""
    rows = read_rows(Path(out_dir))
    if not rows:
        raise FileNotFoundError(f"no results in {out_dir}: expected results*.jsonl written by `kvprune sweep`")
    return pd.DataFrame(rows)


class ResultStore:
    """Appends result lines to one file and knows which runs are already done."""

    def __init__(self, out_dir: Path, rank: int = 0, world_size: int = 1):
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir
        self.path = out_dir / ("results.jsonl" if world_size == 1 else f"results.rank{rank}.jsonl")
        self._handle = None

    def done_keys(self, retry_errors: bool = False) -> set[tuple]:
        return {run_key(r) for r in read_rows(self.out_dir) if not (retry_errors and r.get("error"))}

    def append(self, row: dict) -> None:
        if self._handle is None:
            self._terminate_cut_line()
            self._handle = open(self.path, "a", encoding="utf-8")
        self._handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _terminate_cut_line(self) -> None:
        """A kill mid-write leaves a partial last line; start the next one on a fresh line."""
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as handle:
                handle.seek(-1, 2)
                last = handle.read(1)
            if last != b"\n":
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write("\n")
