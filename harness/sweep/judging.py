"""The sweep's judge: built from ``--judge`` with its cache under the results folder, and what it did,
recorded per sweep start in ``judge.jsonl`` for the report.

Judgements are cached in ``<out>/judge_cache`` keyed by their full input (``harness.judge``), so a
rerun of the same sweep asks the judge nothing; the report counts, over every start, the requests
sent, the judgements answered from the cache, the retries and the failures.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..judge import Judge, parse_judge_spec
from ..setup.environment import now

CACHE_DIR = "judge_cache"
RECORD = "judge.jsonl"


def sweep_judge(spec: str | None, out: Path) -> Judge | None:
    """The judge ``spec`` names, caching under ``out``; None without a spec."""
    return parse_judge_spec(spec, cache_dir=Path(out) / CACHE_DIR) if spec else None


def record_judge(out: Path, spec: str, judge: Judge, rank: int = 0) -> None:
    """Append what ``judge`` did in this start (process ``rank``) to ``judge.jsonl``."""
    line = dict(time=now(), judge=spec, rank=rank, **judge.stats.as_dict())
    with open(Path(out) / RECORD, "a", encoding="utf-8") as file:
        file.write(json.dumps(line) + "\n")


def judge_section(out: Path) -> str:
    """The report's section on the judge: every start's counts and their totals; '' without a judge."""
    path = Path(out) / RECORD
    if not path.is_file():
        return ""
    starts = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not starts:
        return ""
    keys = ("requests", "cache_hits", "retries", "failures")
    total = {key: sum(start[key] for start in starts) for key in keys}
    lines = [f"- {s['time']}: {s['judge']}: {s['requests']} requests sent, {s['cache_hits']} judgements from the cache, "
             f"{s['retries']} retries, {s['failures']} failed" for s in starts]
    return ("## Judge\n\nJudged steps (AVI-Bench's refine step, judged metrics) asked the judge below; judgements are "
            f"cached in {CACHE_DIR}/ by their full input, so a rerun asks nothing again. In all: {total['requests']} "
            f"requests sent, {total['cache_hits']} answered from the cache, {total['retries']} retries, "
            f"{total['failures']} failed (their samples are error rows).\n\n" + "\n".join(lines) + "\n")
