"""MMAU's metric, wired from its rules into the metric registry: ``string_match``, the whole reply
against the gold option's text (MMAR's too), a percentage.
"""

from __future__ import annotations

from ...metrics import Metric, mean_correct, register_metric
from .rules import string_match


def _string_match(parsed: str | None, sample) -> dict[str, float]:
    return {"correct": float(string_match(sample.answer, parsed or "", sample.choices))}


register_metric(Metric("string_match", mean_correct, _string_match))
