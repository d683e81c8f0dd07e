"""F1 and average precision as the official scorers get them from scikit-learn (>= 1.3), without it.

The official scripts call ``sklearn.metrics`` with ``zero_division=0``; these functions give the same
numbers, reduced with numpy the way scikit-learn reduces them (so even the last bits agree):

- per-class F1 = 2·TP / (gold count + predicted count), 0 when both counts are 0;
- the label set is the sorted union of the gold and predicted labels, unless ``labels`` is given,
  in which case exactly those labels count (absent ones with F1 0) and others are ignored;
- ``macro`` is the unweighted mean over the label set, ``weighted`` weights by gold counts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Literal

import numpy as np

Average = Literal["macro", "weighted"]


def accuracy(golds: Sequence[Hashable], predictions: Sequence[Hashable]) -> float:
    """Fraction (0-1) of predictions equal to their gold label (``accuracy_score``)."""
    _check(golds, predictions)
    return float(np.mean([g == p for g, p in zip(golds, predictions)]))


def f1(
    golds: Sequence[Hashable], predictions: Sequence[Hashable], average: Average,
    labels: Sequence[Hashable] | None = None,
) -> float:
    """``f1_score(golds, predictions, average=..., labels=..., zero_division=0)`` on a 0-1 scale."""
    _check(golds, predictions)
    if labels is None:
        labels = sorted(set(golds) | set(predictions))
    scores, support = [], []
    for label in labels:
        gold = sum(g == label for g in golds)
        predicted = sum(p == label for p in predictions)
        hits = sum(g == label and p == label for g, p in zip(golds, predictions))
        scores.append(2 * hits / (gold + predicted) if gold + predicted else 0.0)
        support.append(gold)
    scores_array = np.asarray(scores, dtype=float)
    if average == "macro":
        return float(np.average(scores_array))
    if average == "weighted":
        weights = np.asarray(support, dtype=float)
        return float(np.average(scores_array, weights=weights)) if weights.sum() else 0.0
    raise ValueError(f"unknown F1 average {average!r}: use 'macro' or 'weighted'")


def set_f1(predicted: Iterable[Hashable], gold: Iterable[Hashable]) -> float:
    """Binary F1 of one predicted label set against the gold set: scikit-learn's ``f1_score`` over
    indicator vectors on their union (1 = in the set), i.e. 2·|P∩G| / (|P| + |G|)."""
    predicted, gold = set(predicted), set(gold)
    if not predicted | gold:
        raise ValueError("F1 of two empty label sets is undefined")
    return 2 * len(predicted & gold) / (len(predicted) + len(gold))


def average_precision(relevant: Sequence[bool], scores: Sequence[float]) -> float:
    """``average_precision_score``: sum over the distinct score thresholds, highest first, of
    (recall gained) x (precision at that threshold), with no interpolation. Tied scores enter
    together, so 0/1 scores give ``R·P + (1 - R)·prevalence``."""
    if len(relevant) != len(scores):
        raise ValueError(f"length mismatch: {len(relevant)} vs {len(scores)}")
    positives = sum(bool(r) for r in relevant)
    if not positives:
        raise ValueError("average precision needs at least one relevant item")
    total, recall_before = 0.0, 0.0
    for threshold in sorted(set(scores), reverse=True):
        selected = [bool(r) for r, s in zip(relevant, scores) if s >= threshold]
        hits = sum(selected)
        recall = hits / positives
        total += (recall - recall_before) * (hits / len(selected))
        recall_before = recall
    return total


def _check(golds: Sequence, predictions: Sequence) -> None:
    if len(golds) != len(predictions):
        raise ValueError(f"length mismatch: {len(golds)} golds vs {len(predictions)} predictions")
    if not golds:
        raise ValueError("nothing to score")
