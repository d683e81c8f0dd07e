"""What a results folder holds beyond the runs its summary covers.

A folder's summary, report and figures cover the runs its last command asked for (``plan.json``), so
that every method is compared over the same samples. Runs that earlier commands added to the same
folder (another layer, another method, more samples) stay in it: ``other_runs`` lists them with the
command that added each (``runs.jsonl`` records every start's command line, and each row the start
that wrote it), and ``kvprune report --all`` summarises everything the folder holds.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .identity import SweepPlan, read_plan
from .rows import ResultRow
from .store import read_rows, read_log, unique_runs

EARLIER = "an earlier command (not recorded)"


def other_runs(out_dir: Path | str, rows: list[ResultRow] | None = None, plan: SweepPlan | None = None) -> pd.DataFrame:
    """One row per model x task x method spec the folder holds results of outside its plan (rows of
    samples changed since left out): ``method`` (with its layer), ``ratios``, ``rows``, ``samples``
    and ``commands`` (the command lines that added them, oldest first). ``rows`` and ``plan``: the
    folder's, if already read."""
    plan = read_plan(out_dir) if plan is None else plan
    if plan is None:
        return pd.DataFrame()
    rows = plan.current(read_rows(Path(out_dir)) if rows is None else rows)
    chosen = {id(row) for row in plan.select(rows)}
    others = unique_runs([row for row in rows if id(row) not in chosen and not row.pass_name])  # a timing pass: the same runs
    commands = {run.get("started"): run.get("command") for run in read_log(out_dir) if run.get("started")}
    groups: dict[tuple, list[ResultRow]] = {}
    for row in others:
        method = row.method if row.layer is None else f"{row.method} (layer {row.layer})"
        groups.setdefault((row.model, row.task, method, row.method_id), []).append(row)
    listed = []
    for (model, task, method, _), group in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        added = [commands.get(row.started) or EARLIER for row in sorted(group, key=lambda r: str(r.time))]
        listed.append(dict(model=model, task=task, method=method, ratios=sorted({float(r.ratio) for r in group}),
                           rows=len(group), samples=len({r.sample_id for r in group}),
                           commands=list(dict.fromkeys(added))))
    return pd.DataFrame(listed)


def other_runs_banner(out_dir: Path, others: pd.DataFrame | None = None) -> str:
    """The report's note on the runs of the folder its summary leaves out, or nothing."""
    others = other_runs(out_dir) if others is None else others
    if others.empty:
        return ""
    lines = [f"> **This report covers the runs the last command asked for.** {out_dir} also holds {others['rows'].sum()} "
             "result(s) that earlier commands added, not summarised here:\n>"]
    for row in others.to_dict("records"):
        ratios = ", ".join(f"{r:g}" for r in row["ratios"])
        lines.append(f"> - {row['model']} / {row['task']}: {row['method']} at ratio {ratios}, {row['samples']} sample(s), "
                     f"added by {' and '.join(f'`{c}`' if c != EARLIER else c for c in row['commands'])}")
    lines.append(f">\n> `kvprune report {out_dir} --all` (and `kvprune plot {out_dir} --all`) summarises every run the "
                 "folder holds, each method spec on its own row.")
    return "\n".join(lines) + "\n"
