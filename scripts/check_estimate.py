"""Check ``kvprune estimate`` against the sweep it prices: run both with the same options, one after
the other on this machine, and write the table of estimated against measured time per task.

    python scripts/check_estimate.py --out check_demo_cpu --rounds 3      # the demo sweep (no options), a CPU
    python scripts/check_estimate.py --out $OUT/demo_gpu --work /tmp/check_demo -- --device cuda
    SEVEN_B="--preset qwen2.5-omni-7b --tasks tau,vox_gender --limit 224 --batch-size 32 --methods fastv \\
        --ratios 0.9 --timing-samples 2"                    # a dry run at the 7B shape, 2 x 224 samples (the sweep: 6.5 min on an H100)
    python scripts/check_estimate.py --out $OUT/omni7b --work /tmp/check_7b --part estimate \\
        --estimate "--repeats 2 --modes sweep" -- $SEVEN_B   # one device call
    python scripts/check_estimate.py --out $OUT/omni7b --work /tmp/check_7b --part sweep -- $SEVEN_B   # the next
    python scripts/check_estimate.py --out $OUT/omni7b --work /tmp/check_7b --part table \\
        --estimate "--repeats 2 --modes sweep" -- $SEVEN_B   # the table, from both

Where the two commands do not fit one sitting (a device that allows ten minutes a call), run them apart
with the same options and ``--work``, then tabulate: ``--part estimate``, ``--part sweep`` (each records
its wall time in ``--work``), then ``--part table`` on the same machine (check.md names the machine it runs on).

Everything after ``--`` is given to both commands (``kvprune estimate`` and ``kvprune sweep``);
``--estimate`` holds the estimate's own options. Each command runs in its own process with empty
compilation caches (Inductor's and Triton's), as a first run would. ``--rounds N`` runs the pair N
times, alternately (estimate, sweep, estimate, sweep...), and compares the medians: on a machine whose
load drifts (a shared CPU) each side then sees the same drift. Measured per task: the seconds
the sweep recorded for it in runs.jsonl (its scoring pass and timing subset, compilations met there
included); ``fixed``: the rest of the sweep command's wall time (starting, loading, planning, writing
the outputs); ``total``: the command's wall time. Estimated: the estimate's ``sweep`` rows (median,
with the fastest-slowest repeats). Beside them, the CUDA graphs the estimate priced per task against those the sweep
captured there (runs.jsonl), so that a task's capture cost can be told from its host's noise. Writes six files to ``--out``: check.md (the table, the commands,
the machine, the date, and each round's seconds per task beside the others'), check.csv, rounds.csv (each
round's seconds, graphs, and the host's speed each side saw, per task),
estimate.md, estimate_timed.csv (every call and batch each round's estimate timed, with the host's speed
before each batch: its ``round`` column) and sweep_report.md (the last round's); the two commands' folders go to
``--work`` (default: a folder under ``--out``'s parent that is left in place).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from kvprune.harness.estimate.report_rows import FIXED, TOTAL
from kvprune.harness.sweep.store import TASK_TIME_RECORD, read_log

ESTIMATE, SWEEP = "estimate", "sweep"
PARTS = ("both", ESTIMATE, SWEEP, "table")


def run(command: list[str], log: Path) -> float:
    """Run ``command`` with fresh compilation caches; its wall time in seconds (its output in ``log``)."""
    with tempfile.TemporaryDirectory(prefix="kvprune-check-cache-") as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{cache}/inductor", TRITON_CACHE_DIR=f"{cache}/triton")
        start = time.perf_counter()
        with open(log, "w") as handle:
            done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
        seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: a sweep whose runs partly failed still measured its time
        sys.exit(f"{shlex.join(command)} exited with {done.returncode}; see {log}")
    return seconds


def median_of(frames: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames).groupby(level=0, sort=False).median()


def swept(sweep_out: Path, wall: float) -> pd.DataFrame:
    """One sweep's seconds and CUDA graphs captured per task, from its runs.jsonl (a resumed sweep records a task once
    per part; graphs: none for a log without the counts), then ``fixed``, the rest of its command's wall time, and
    ``total``, the whole; ``host_ns``: the host's speed as a task started (its first part's)."""
    seconds: dict[str, float] = {}
    graphs: dict[str, float] = {}
    host: dict[str, float] = {}
    for record in read_log(sweep_out, kind=TASK_TIME_RECORD):
        task = record.get("task")  # None: loading
        if task:
            seconds[task] = seconds.get(task, 0.0) + record["seconds"]
            if "cuda_graphs" in record:
                graphs[task] = graphs.get(task, 0.0) + record["cuda_graphs"]
            if "host_loop_ns" in record:
                host.setdefault(task, record["host_loop_ns"])
    seconds.update({FIXED: wall - sum(seconds.values()), TOTAL: wall})
    if graphs:
        graphs[TOTAL] = sum(graphs.values())
    return pd.DataFrame({"seconds": seconds, "graphs": pd.Series(graphs, dtype=float), "host_ns": pd.Series(host, dtype=float)})


def timed_calls(estimate_out: Path) -> pd.DataFrame:
    """The calls and batches an estimate timed (its timed.csv; empty where it wrote none)."""
    path = estimate_out / "timed.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def estimated(estimate_out: Path, timed: pd.DataFrame | None = None) -> pd.DataFrame:
    """The estimate's sweep rows per task (seconds, fastest, slowest, CUDA graphs priced), its fixed costs, and the
    total; ``host_ns``: the host's speed before the task's timed batches (their median, from ``timed``: its
    ``timed_calls``, read here if not given)."""
    table = pd.read_csv(estimate_out / "estimate.csv")
    rows = table[(table["mode"] == "sweep") & (table["task"] != TOTAL)].set_index("task")
    rows = rows.reindex(columns=["seconds", "seconds_low", "seconds_high", "graphs"])  # graphs: NaN before they were priced
    rows.loc[TOTAL] = rows.sum(min_count=1)
    timed = timed_calls(estimate_out) if timed is None else timed
    if "host_loop_ns" in timed:
        rows["host_ns"] = timed[timed["kind"] == "batch"].groupby("task")["host_loop_ns"].median()
    return rows


def table(estimate: pd.DataFrame, sweep: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for task, row in estimate.iterrows():
        seen = sweep["seconds"].get(task)
        rows.append(dict(task=task, estimated_s=row["seconds"], fastest_s=row["seconds_low"], slowest_s=row["seconds_high"],
                         measured_s=seen, error=None if not seen else row["seconds"] / seen - 1,
                         estimated_graphs=row["graphs"], measured_graphs=sweep["graphs"].get(task)))
    return pd.DataFrame(rows)


def markdown(frame: pd.DataFrame, commands: list[str], device: str, note: str) -> str:
    lines = ["# kvprune estimate against the sweep it prices\n", f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"- machine: {device}", f"- commit: {note}", *[f"- `{c}`" for c in commands], "",
             "| task | estimated s (fastest-slowest) | measured s | error | CUDA graphs priced / captured |",
             "|---|---|---|---|---|"]
    for r in frame.itertuples():
        error = "—" if pd.isna(r.error) else f"{100 * r.error:+.1f}%"
        graphs = f"{_number(r.estimated_graphs, '{:.1f}')} / {_number(r.measured_graphs, '{:.0f}')}"
        lines.append(f"| {r.task} | {r.estimated_s:.1f} ({r.fastest_s:.1f}-{r.slowest_s:.1f}) | "
                     f"{_number(r.measured_s, '{:.1f}')} | {error} | {graphs} |")
    return "\n".join(lines) + "\n"


def _number(value, form: str) -> str:
    return "—" if pd.isna(value) else form.format(value)


def machine() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"
        return f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average " \
               f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end (torch {torch.__version__})"
    except ImportError:
        return platform.platform()


def main() -> int:
    words = sys.argv[1:]
    shared = words[words.index("--") + 1 :] if "--" in words else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the six files go")
    parser.add_argument("--work", type=Path, help="where the estimate's and the sweep's folders go")
    parser.add_argument("--estimate", default="", help="the estimate's own options, quoted")
    parser.add_argument("--rounds", type=int, default=1, help="estimate and sweep this many times, alternately")
    parser.add_argument("--part", choices=PARTS, default="both",
                        help="run one command alone (its wall time kept in --work), or tabulate the two (default: both)")
    args = parser.parse_args(words[: words.index("--")] if "--" in words else words)
    if args.part != "both" and args.rounds != 1:
        parser.error("--rounds needs --part both: rounds alternate the two commands.")
    work = args.work or args.out.parent / f"{args.out.name}_work"
    for folder in (args.out, work):
        folder.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "kvprune.harness.cli"]
    commands = {ESTIMATE: [*cli, "estimate", *shared, *shlex.split(args.estimate), "--out", str(work / ESTIMATE), "--quiet"],
                SWEEP: [*cli, "sweep", *shared, "--out", str(work / SWEEP), "--quiet"]}
    if args.part in commands:
        run_part(args.part, commands[args.part], work)
        return 0
    if args.part == "table":
        missing = [side for side in commands if not (work / f"{side}.wall").is_file()]
        if missing:
            parser.error(f"no finished {' or '.join(missing)} in {work}: run --part {missing[0]} with this --work first.")
        walls = [tuple(float((work / f"{side}.wall").read_text()) for side in commands)]
        timed = [timed_calls(work / ESTIMATE).assign(round=1)]
        estimates, sweeps = [estimated(work / ESTIMATE, timed[0])], [swept(work / SWEEP, walls[0][1])]
    else:
        estimates, sweeps, walls, timed = [], [], [], []
        for number in range(1, args.rounds + 1):
            walls.append(tuple(run_part(side, command, work) for side, command in commands.items()))
            timed.append(timed_calls(work / ESTIMATE).assign(round=number))  # the next round replaces the file
            estimates.append(estimated(work / ESTIMATE, timed[-1]))
            sweeps.append(swept(work / SWEEP, walls[-1][1]))
    write_outputs(args, work, commands, walls, estimates, sweeps, timed)
    return 0


def run_part(side: str, command: list[str], work: Path) -> float:
    """One command in a fresh folder; its wall time, also kept in ``work`` for ``--part table``."""
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / side, ignore_errors=True)
    (work / f"{side}.wall").unlink(missing_ok=True)
    seconds = run(command, work / f"{side}.log")
    (work / f"{side}.wall").write_text(f"{seconds}\n")
    return seconds


def commit() -> str:
    """The commit the code ran at, and whether the tracked files differ from it (a copy of the tree whose
    ``.git`` is older, as on a device that receives the working tree alone, says so rather than naming the
    older commit as if it had run)."""
    def git(*words: str) -> str:
        return subprocess.run(["git", *words], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    changed = git("status", "--porcelain", "--untracked-files=no")
    return f"{head}, tracked files changed since (record the tree's commit by hand)" if changed else head


def per_round(estimates: list[pd.DataFrame], sweeps: list[pd.DataFrame]) -> pd.DataFrame:
    """Each round's estimated and measured seconds per task: rounds that agree with each other and not with
    the median's error say bias; rounds that disagree say the host's noise."""
    return pd.DataFrame([dict(round=index, task=task, estimated_s=row["seconds"], measured_s=sweep["seconds"].get(task),
                              estimated_graphs=row["graphs"], measured_graphs=sweep["graphs"].get(task),
                              estimated_host_ns=row.get("host_ns"), measured_host_ns=sweep.get("host_ns", {}).get(task))
                         for index, (estimate, sweep) in enumerate(zip(estimates, sweeps), 1)
                         for task, row in estimate.iterrows()])


HOSTS_APART = 1.3  # the two sides' host loops further apart than this: a round's error is the host's


def hosts_apart(row) -> bool:
    """Whether the estimate and the sweep timed a task on hosts more than ``HOSTS_APART`` apart in speed (a fixed
    loop's ns on each side; False where either side did not record it)."""
    speeds = (row.estimated_host_ns, row.measured_host_ns)
    if not all(pd.notna(speed) and speed > 0 for speed in speeds):
        return False
    return max(speeds) / min(speeds) > HOSTS_APART


def rounds_markdown(rounds: pd.DataFrame) -> str:
    """The rounds side by side (empty for one round: the table above is it), a cell marked where the two sides'
    hosts ran at speeds far apart."""
    if rounds["round"].nunique() < 2:
        return ""
    numbers = sorted(rounds["round"].unique())
    lines = ["", "Each round, estimated / measured s:", "",
             "| task | " + " | ".join(f"round {n}" for n in numbers) + " |", "|---|" + "---|" * len(numbers)]
    marked = False
    for task, rows in rounds.groupby("task", sort=False):
        cells = []
        for r in rows.itertuples():
            apart = hosts_apart(r)
            marked |= apart
            cells.append(f"{r.estimated_s:.1f} / {'—' if pd.isna(r.measured_s) else f'{r.measured_s:.1f}'}"
                         + (f" † ({r.estimated_host_ns:.0f} / {r.measured_host_ns:.0f} ns)" if apart else ""))
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    if marked:
        lines += ["", f"† the estimate's and the sweep's hosts ran more than {HOSTS_APART}x apart in speed as they timed "
                  "this task (a fixed Python loop's ns per iteration, each side's; rounds.csv): the round's error is "
                  "largely the host's."]
    return "\n".join(lines) + "\n"


def write_outputs(args, work: Path, commands: dict[str, list[str]], walls: list[tuple[float, float]],
                  estimates: list[pd.DataFrame], sweeps: list[pd.DataFrame], timed: list[pd.DataFrame] = ()) -> None:
    """The check's files; ``timed``: each round's ``timed_calls`` (with its ``round``)."""
    estimate_wall, sweep_wall = (statistics.median(w) for w in zip(*walls))  # as the tables' medians
    frame = table(median_of(estimates), median_of(sweeps))
    frame.to_csv(args.out / "check.csv", index=False)
    rounds = per_round(estimates, sweeps)
    rounds.to_csv(args.out / "rounds.csv", index=False)
    walls_text = f", median of {args.rounds} rounds: " + "; ".join(f"{e:.0f} s / {s:.0f} s" for e, s in walls) if args.rounds > 1 else ""
    lines = [f"kvprune estimate {shlex.join(commands[ESTIMATE][4:])}  ({estimate_wall:.0f} s)",
             f"kvprune sweep {shlex.join(commands[SWEEP][4:])}  ({sweep_wall:.0f} s{walls_text})"]
    (args.out / "check.md").write_text(markdown(frame, lines, machine(), commit()) + rounds_markdown(rounds))
    shutil.copy(work / ESTIMATE / "estimate.md", args.out / "estimate.md")
    if any(not calls.empty for calls in timed):  # every round's calls and batches, as the estimate timed them
        pd.concat(timed).to_csv(args.out / "estimate_timed.csv", index=False)
    shutil.copy(work / SWEEP / "report.md", args.out / "sweep_report.md")
    print((args.out / "check.md").read_text())


if __name__ == "__main__":
    sys.exit(main())
