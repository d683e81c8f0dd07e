"""STAR-Bench's metrics, wired from its rules (``rules``) into the metric registry: ``starbench_aa`` and
``starbench_acr`` (option ``starbench_part``: perception parts ``pc*`` average over sub-categories of
2-decimal scores, reasoning parts pool their runs). Percentages (the official 0-1 scores times 100).
"""

from __future__ import annotations

from collections.abc import Callable

from ...metrics import Metric, correct, register_metric
from ...metrics import row_meta as meta
from . import rules


def _starbench(key: str) -> Callable[..., float]:
    def compute(rows: list[dict], starbench_part: str) -> float:
        results = [
            rules.RunResult(r["item"], meta(r).get("category"), meta(r).get("sub-category"), bool(r["correct"]))
            for r in rows
        ]
        return rules.part_scores(starbench_part, results)["Total"][key]

    return compute


def _starbench_run(parsed: str | None, sample, starbench_part: str) -> dict[str, float]:
    """A run is right when the parsed letter is the run's gold letter (the part does not matter here)."""
    return correct(parsed, sample)


STARBENCH_PARTS = tuple(rules.PARTS)
register_metric(Metric("starbench_aa", _starbench("AA"), _starbench_run, options={"starbench_part": STARBENCH_PARTS}))
register_metric(Metric("starbench_acr", _starbench("ACR"), _starbench_run, options={"starbench_part": STARBENCH_PARTS}))
