"""ST-AudioQA's metrics (provisional), wired from its rules into the metric registry:
``st_answer_accuracy``, ``st_yes_no_accuracy``, ``st_event_map``, ``st_family_average``, by the item's
``kind`` (``answer``, ``verification``, ``detection``). Percentages, NaN when no row applies.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ...metrics import Metric, mean_correct, parsed_of, register_metric
from ...metrics import row_meta as meta
from . import rules

NAN = float("nan")

ST_KINDS = ("answer", "verification", "detection")


def _kind(item_meta: dict) -> str:
    kind = item_meta.get("kind")
    if kind not in ST_KINDS:
        raise ValueError(f"ST-AudioQA item kind {kind!r}: the kind field must be one of {ST_KINDS}")
    return kind


def _gold_labels(answer: str) -> set[str]:
    """A detection item's gold label set: its answer split at ``;`` or ``,``, normalised."""
    return {rules.normalize_answer(label) for label in re.split(r"[;,]", answer)} - {""}


def _st_per_sample(parsed: str | None, sample) -> dict[str, float]:
    kind, reply = _kind(sample.meta), parsed or ""
    if kind == "detection":
        return {}
    if kind == "verification":
        return {"correct": float(rules.parse_yes_no(reply) == rules.normalize_answer(sample.answer))}
    return {"correct": float(rules.normalize_answer(reply) == rules.normalize_answer(sample.answer))}


def _of_kind(rows: list[dict], kind: str) -> list[dict]:
    return [r for r in rows if _kind(meta(r)) == kind]


def _st_accuracy(kind: str) -> Callable[[list[dict]], float]:
    score = rules.yes_no_accuracy if kind == "verification" else rules.answer_accuracy

    def compute(rows: list[dict]) -> float:
        chosen = _of_kind(rows, kind)
        return score([str(r["reference"]) for r in chosen], [parsed_of(r) or "" for r in chosen]) if chosen else NAN

    return compute


def _st_map(rows: list[dict]) -> float:
    chosen = _of_kind(rows, "detection")
    if not chosen:
        return NAN
    golds = [_gold_labels(str(r["reference"])) for r in chosen]
    classes = sorted({label for labels in golds for label in labels})
    predicted = [rules.label_set(parsed_of(r) or "", classes) for r in chosen]
    return rules.event_map(golds, predicted, classes)


def _st_family_average(rows: list[dict]) -> float:
    """Type C's "Avg.": the plain mean of its three families' answer accuracies (NaN when one is absent)."""
    accuracies = {}
    for family in rules.FAMILIES["C"]:
        chosen = [r for r in rows if meta(r).get("family") == family]
        if chosen:
            accuracies[family] = mean_correct(chosen)
    return rules.compositional_average(accuracies) if len(accuracies) == 3 else NAN


register_metric(Metric("st_answer_accuracy", _st_accuracy("answer"), _st_per_sample))
register_metric(Metric("st_yes_no_accuracy", _st_accuracy("verification"), _st_per_sample))
register_metric(Metric("st_event_map", _st_map, _st_per_sample))
register_metric(Metric("st_family_average", _st_family_average, _st_per_sample))
