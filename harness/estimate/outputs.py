"""What writing a sweep's outputs costs (summary.csv, report.md and, unless --no-plots, the figures):
timed by writing them, in a scratch folder, for the rows the estimate's own runs wrote, copied out to
the sweep's count of rows (every sample under every run), at most ``MAX_ROWS`` of them, the time then
scaled to the full count."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from ..sweep.report import write_outputs
from ..sweep.rows import ResultRow
from ..sweep.store import RUNS_FILE

MAX_ROWS = 20_000


def outputs_seconds(rows: list[ResultRow], runs: list, tasks: list, counts: dict[str, tuple[int, int]], plots: bool) -> float:
    """Seconds to write the outputs of a sweep of ``counts[task]`` samples per task (in the scoring
    pass, in the timing subset), each under every run, from ``rows`` (the estimate's, of some samples
    and some runs)."""
    full = len(runs) * sum(sum(count) for count in counts.values())
    if not full or not rows:
        return 0.0
    scale = min(1.0, MAX_ROWS / full)
    with tempfile.TemporaryDirectory(prefix="kvprune-estimate-") as scratch:
        folder = Path(scratch)
        record = dict(time="", model=rows[0].model, device="", encoder="", versions={},
                      tasks={task.name: task.config for task in tasks})  # what the report reads of a sweep's record
        (folder / RUNS_FILE).write_text(json.dumps(record, default=str) + "\n")
        with open(folder / "results.jsonl", "w") as handle:
            for task in tasks:
                for timing, samples in zip((False, True), counts[task.name]):
                    like = [r for r in rows if r.task == task.name and (r.pass_name is not None) == timing]
                    for row in _copies(like, runs, round(samples * scale)):
                        handle.write(json.dumps(row.to_json(), default=str) + "\n")
        start = time.perf_counter()
        write_outputs(folder, plots=plots)
        return (time.perf_counter() - start) / scale


def _copies(rows: list[ResultRow], runs: list, samples: int):
    """``samples`` samples' rows under every run, like ``rows``: a run the estimate did not time takes a
    timed row of its method, relabelled; each sample under a new id."""
    if not rows:
        return
    by_method = {row.method_id: row for row in rows}
    for n in range(samples):
        for run in runs:
            row = by_method.get(run.method_id, rows[0])
            yield replace(row, method=run.method, ratio=run.ratio, layer=run.layer, method_id=run.method_id,
                          sample_id=f"{row.sample_id}~{n}")
