"""MMAR-Rubrics' metrics, wired from its rules (``rubrics``) into the metric registry: ``mmar_rubrics``
(judged: the rubric score, 0 for a wrong answer) and ``mmar_rubrics_accuracy``. MMAR itself is scored
by MMAU's ``string_match`` (``mmau/metrics.py``). Percentages.
"""

from __future__ import annotations

import math

from ...judged import require_judge
from ...metrics import Metric, mean_correct, register_metric
from ..mmau.rules import string_match
from . import rubrics


def _rubric_per_sample(parsed: str | None, sample, judge) -> dict[str, float]:
    """MMAR-Rubrics on one reply: its reasoning rated against the item's rubric by the judge (5
    ratings, the mean of the middle 3), 0 when the final answer is wrong."""
    judge = require_judge(judge, "MMAR-Rubrics (mmar_rubrics)")
    missing = [name for name in ("thinking", "rubric") if name not in sample.meta]
    if missing:
        raise ValueError(f"MMAR item {sample.id} has no {missing}: MMAR-Rubrics reads the thinking and rubric fields of "
                         "MMAR-meta.jsonl (keep them with layout_options.meta_fields)")
    item = dict(id=sample.id, question=sample.question, answer=sample.answer, choices=sample.choices,
                thinking=sample.meta["thinking"], rubric=sample.meta["rubric"])
    thinking, answer = rubrics.split_reply(parsed or "")
    result = rubrics.rubric_score(judge, item, thinking, answer)
    return {"rubric": 100.0 * result.score}


def _answer_span_match(parsed: str | None, sample) -> dict[str, float]:
    """MMAR-Rubrics' accuracy: ``string_match`` on the final answer alone (what decides a 0 rubric score)."""
    return {"correct": float(string_match(sample.answer, rubrics.split_reply(parsed or "")[1], sample.choices))}


def _rubric_mean(rows: list[dict]) -> float:
    """The mean rubric score over the rows; a row without one (its judgement failed: an error row)
    counts 0, as every failed sample counts as wrong."""
    values = [r.get("rubric") for r in rows]
    return sum(float(v) for v in values if isinstance(v, (int, float)) and not math.isnan(v)) / len(rows)


register_metric(Metric("mmar_rubrics", _rubric_mean, _rubric_per_sample, judged=True))
register_metric(Metric("mmar_rubrics_accuracy", mean_correct, _answer_span_match))
