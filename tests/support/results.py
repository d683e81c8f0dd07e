"""What a sweep wrote to its results files, as the JSON objects of their lines (what a user reads with
pandas or jq), and a line's run key, for tests that check the files rather than the typed rows."""

from __future__ import annotations

from pathlib import Path

from kvprune.harness.sweep.rows import ResultRow, RunKey
from kvprune.harness.sweep.store import read_rows


def result_lines(out: Path) -> list[dict]:
    """Every complete line of every results file of ``out``, as its JSON object."""
    return [row.to_json() for row in read_rows(out)]


def line_key(line: dict) -> RunKey:
    """The run a results line is of (``ResultRow.key``)."""
    return ResultRow.from_json(line).key
