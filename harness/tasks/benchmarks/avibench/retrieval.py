"""AVI-Bench's retrieval tasks (AVR: images for a sound, VAR: sounds for an image), reproduced from
FudanCVL/AVI-Bench ``eval/level_metrics/level_score.py: eval_retrieval, set_f1``.

The gold ``question_answer`` is the list of right indices. A reply is cleaned like the full-match
tasks (lower-cased, every character that is neither a word character nor whitespace deleted), so
``"[0, 3]"`` reads as ``"0 3"`` and ``"0,3"`` as ``"03"``; the whitespace-separated all-digit tokens
are the predicted indices. Scores are 0-1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .rules import answered, clean

MANY_INDICES = 6  # a reply naming more indices than this counts with confidence 0.3
LOW_CONFIDENCE = 0.3
REPEAT_TOLERANCE = 0.8  # ``tau``: the share of repeated predictions tolerated before a penalty


def predicted_indices(reply: str) -> list[int]:
    """The reply's indices in the official order: ``list(set(sorted(...)))``, which is CPython's
    set order for those integers (ascending for small ones, not in general), and that order
    decides Recall@1 and Recall@3."""
    tokens = clean(reply, clean_symbol=True).replace("\n", " ").split(" ")
    return list(set(sorted(int(t) for t in tokens if t.isdigit())))


def retrieval_f1(predicted: Sequence, gold: Sequence) -> float:
    """Their ``set_f1``: 1 for two empty sets, 0 if only one is empty, else 2PR / (P + R)."""
    predicted, gold = set(predicted), set(gold)
    if not predicted and not gold:
        return 1.0
    if not predicted or not gold:
        return 0.0
    precision = len(predicted & gold) / len(predicted)
    recall = len(predicted & gold) / len(gold)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def score_retrieval(entries: Sequence[Mapping], replies: Sequence[str | None]) -> dict[str, float]:
    """``eval_retrieval``: ``{"Recall@1", "Recall@3", "F1_score", "Average"}``.

    Per entry: F1 (``retrieval_f1``), and whether any of the first 1 (3) predicted indices is right.
    Each mean is scaled by the mean confidence (0.3 for an entry naming more than 6 indices, else 1)
    and by a repeat penalty, ``1 - (max(0.8, r) - 0.8)`` where ``r`` is the share of entries whose
    index list repeats an earlier entry's; then rounded to 5 decimals. Average =
    ``((R@1 + R@3) / 2 + F1) / 2`` of those rounded numbers, not rounded again. (The official
    function also computes an average precision that it never reports; it is left out.)
    """
    pairs = answered(entries, replies)
    if not pairs:
        raise ValueError("no entry has a reply")
    f1s, hits_1, hits_3, distinct, confidence = [], [], [], [], []
    for entry, reply in pairs:
        gold = entry["output"]["question_answer"]
        predicted = predicted_indices(reply)
        f1s.append(retrieval_f1(predicted, gold))
        if predicted not in distinct:
            distinct.append(predicted)
        confidence.append(LOW_CONFIDENCE if len(predicted) > MANY_INDICES else 1)
        hits_1.append(1.0 if any(p in gold for p in predicted[:1]) else 0.0)
        hits_3.append(1.0 if any(p in gold for p in predicted[:3]) else 0.0)
    repeat = max(REPEAT_TOLERANCE, (len(pairs) - len(distinct)) / len(pairs))
    scale = np.mean(confidence), 1 - (repeat - REPEAT_TOLERANCE)
    r1, r3, f1 = (float(round(np.mean(values) * scale[0] * scale[1], 5)) for values in (hits_1, hits_3, f1s))
    return {"Recall@1": r1, "Recall@3": r3, "F1_score": f1, "Average": ((r1 + r3) / 2 + f1) / 2}
