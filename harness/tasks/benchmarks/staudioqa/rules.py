"""ST-AudioQA (spatio-temporal audio QA over first-order ambisonic scenes): PROVISIONAL metrics.

No data and no scorer are public; this follows the paper's text only. Questions come in three QA
types, each holding QA families (``FAMILIES``), and are scored by kind: open event detection with
AudioSet-style mAP over the predicted label sets, event verification with yes/no accuracy, every
other family (direction, distance, spatial change, movement, grounding, relations) with answer
accuracy; type C also reports the mean of its three families. Everything below that the paper does
not fix is our choice, marked as such, to be replaced by the official scorer when it appears:
answer normalisation, how a label set is read from a reply (``;``- or ``,``-separated), the 0/1
scores behind mAP, and leaving out classes no gold set contains. Numbers are percentages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from ....scoring.classification import average_precision

QA_TYPES = {
    "A": "single-source perception",
    "B": "two-source perception and grounding",
    "C": "compositional source-time-space reasoning",
}
FAMILIES = {
    "A": ("event semantics", "movement status", "spatial location", "spatial change"),
    "B": ("event semantics", "movement status", "spatial location", "spatial change", "source grounding"),
    "C": ("temporal relation change", "movement-conditioned spatial relation", "cross-source trajectory relation"),
}


def normalize_answer(text: str) -> str:
    """Provisional: lower-cased, inner whitespace runs made one space, surrounding whitespace,
    quotes and ``.,;:!?`` removed ("Back-right." -> "back-right", "2.0--2.5 m" unchanged)."""
    return re.sub(r"\s+", " ", text.lower()).strip(" \t\n\"'`.,;:!?")


def parse_yes_no(reply: str) -> str | None:
    """Provisional: ``yes`` or ``no`` when the normalised reply starts with that word, else None."""
    first = normalize_answer(reply).split(" ", 1)[0].strip(",.;:!?")
    return first if first in ("yes", "no") else None


def yes_no_accuracy(golds: Sequence[str], replies: Sequence[str]) -> float:
    """Event verification: % of replies whose yes/no equals the gold (no yes/no = wrong)."""
    _check(golds, replies)
    return 100.0 * float(np.mean([parse_yes_no(r) == normalize_answer(g) for g, r in zip(golds, replies)]))


def answer_accuracy(golds: Sequence[str], replies: Sequence[str]) -> float:
    """Every other family: % of replies equal to the gold answer after ``normalize_answer``."""
    _check(golds, replies)
    return 100.0 * float(np.mean([normalize_answer(r) == normalize_answer(g) for g, r in zip(golds, replies)]))


def label_set(reply: str, classes: Iterable[str]) -> set[str]:
    """Provisional: the known classes named in a reply listing events separated by ``;`` or ``,``
    (the paper's answers read "dog bark; clapping"); unknown names are ignored."""
    known = {normalize_answer(c): c for c in classes}
    return {known[n] for n in (normalize_answer(part) for part in re.split(r"[;,]", reply)) if n in known}


def event_map(
    gold_sets: Sequence[Iterable[str]], predicted_sets: Sequence[Iterable[str]], classes: Sequence[str]
) -> float:
    """Open event detection: mean over classes of the average precision of "predicted" (score 1)
    vs "not predicted" (score 0) across questions, in %. Classes that no gold set contains are left
    out (their AP is undefined); 0/1 scores make a class's AP ``R·P + (1 - R)·prevalence``."""
    _check(gold_sets, predicted_sets)
    golds, predicted = [set(g) for g in gold_sets], [set(p) for p in predicted_sets]
    scored = [c for c in classes if any(c in g for g in golds)]
    if not scored:
        raise ValueError("no class occurs in the gold label sets")
    aps = [average_precision([c in g for g in golds], [float(c in p) for p in predicted]) for c in scored]
    return 100.0 * float(np.mean(aps))


def compositional_average(family_accuracies: dict[str, float]) -> float:
    """Type C's "Avg." column: the plain mean of its three families' accuracies."""
    missing = set(FAMILIES["C"]) - set(family_accuracies)
    if missing:
        raise ValueError(f"type C average needs all of {FAMILIES['C']}; missing {sorted(missing)}")
    return float(np.mean([family_accuracies[f] for f in FAMILIES["C"]]))


def _check(golds: Sequence, replies: Sequence) -> None:
    if len(golds) != len(replies) or not golds:
        raise ValueError(f"need as many replies as golds, at least one ({len(golds)} vs {len(replies)})")
