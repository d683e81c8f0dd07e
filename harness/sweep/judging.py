"""The sweep's judge: built from ``--judge`` with its cache under the results folder, and what it did,
recorded per sweep start in ``judge.jsonl`` for the report.

Judgements are cached in ``<out>/judge_cache`` keyed by their full input (``harness.judge``), so a
rerun of the same sweep asks the judge nothing; the report counts, over every start, the requests
sent, the judgements answered from the cache, the retries, the failures and the judgements not asked
once the judge's circuit breaker opened (its endpoint stopped replying: said at once on stderr, and
in the report). ``--retry-errors`` grades the runs the judge failed again from their stored outputs
(``rescore.regrade_judge_failures``): nothing is generated again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tqdm.auto import tqdm

from ..judge import CircuitBreaker, Judge, parse_judge_spec
from ..setup.environment import now
from .store import read_log

CACHE_DIR = "judge_cache"
RECORD = "judge.jsonl"


def sweep_judge(spec: str | None, out: Path) -> Judge | None:
    """The judge ``spec`` names, caching under ``out``, saying on stderr the moment its circuit
    breaker opens; None without a spec."""
    if not spec:
        return None
    return parse_judge_spec(spec, cache_dir=Path(out) / CACHE_DIR, breaker=CircuitBreaker(on_open=_say))


def _say(message: str) -> None:
    tqdm.write(f"kvprune sweep: {message}", file=sys.stderr)


def unreachable(judge: Judge | None) -> str | None:
    """The sentence of a judge whose circuit breaker opened in this start; None otherwise."""
    breaker = getattr(judge, "breaker", None)
    return None if breaker is None else breaker.opened


def judge_spec(out: Path) -> str | None:
    """The ``--judge`` the folder's results were graded with: that of its last model run
    (``runs.jsonl``; the summary reads the runs of the last sweep, whose judge is part of their
    settings); None without one."""
    runs = read_log(out)
    return (runs[-1].get("config") or {}).get("judge") if runs else None


def record_judge(out: Path, spec: str, judge: Judge, rank: int = 0) -> None:
    """Append what ``judge`` did in this start (process ``rank``) to ``judge.jsonl``."""
    line = dict(time=now(), judge=spec, rank=rank, **judge.stats.as_dict(), unreachable=unreachable(judge))
    with open(Path(out) / RECORD, "a", encoding="utf-8") as file:
        file.write(json.dumps(line) + "\n")


def judge_section(out: Path) -> str:
    """The report's section on the judge: every start's counts and their totals, and the starts in
    which it stopped replying; '' without a judge."""
    path = Path(out) / RECORD
    if not path.is_file():
        return ""
    starts = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not starts:
        return ""
    keys = ("requests", "cache_hits", "retries", "failures", "skipped")
    total = {key: sum(start.get(key, 0) for start in starts) for key in keys}  # older records have no "skipped"
    lines = [f"- {s['time']}: {s['judge']}: {s['requests']} requests sent, {s['cache_hits']} judgements from the cache, "
             f"{s['retries']} retries, {s['failures']} failed, {s.get('skipped', 0)} not asked" for s in starts]
    down = [f"> **The judge stopped replying ({s['time']}).** {s['unreachable']}" for s in starts if s.get("unreachable")]
    return ("## Judge\n\n" + ("\n>\n".join(down) + "\n\n" if down else "")
            + "Judged steps (AVI-Bench's refine step, judged metrics) asked the judge below; judgements are "
            f"cached in {CACHE_DIR}/ by their full input, so a rerun asks nothing again. In all: {total['requests']} "
            f"requests sent, {total['cache_hits']} answered from the cache, {total['retries']} retries, "
            f"{total['failures']} failed and {total['skipped']} not asked once the judge stopped replying (the samples "
            "of both are error rows).\n\n" + "\n".join(lines) + "\n")
