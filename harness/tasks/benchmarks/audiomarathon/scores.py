"""AudioMarathon's scoring, reproduced from DabDans/AudioMarathon ``src/Qwen_2.5_Omni/Others/*_qwen2.5.py``
(their metric functions and summaries); the other models' scripts score by rules of the same shape
(``model_scripts.RULES``).

F1 is computed only over the samples whose prediction (and gold) is a valid label, so unparsed answers
are dropped, not counted wrong; ``correct_rate`` is the share of all samples answered right, as their
progress bars show it (and as the scripts that print accuracy alone compute it). ``TASKS`` says which
number each leaderboard column is. All numbers are on a 0-1 scale except ASR's, which are
percentages, as in the scripts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .rules import LETTERS
from ....scoring.classification import accuracy, f1
from ....scoring.edit_distance import edit_distance

NONEMPTY = "nonempty"  # a rule's ``valid``: any non-empty label counts (Phi-4's DESED and SLUE metrics)



@dataclass(frozen=True)
class Task:
    """How one script scores: which labels are valid (``None``: the gold labels seen; ``NONEMPTY``:
    any), whether the F1 averages run over exactly those labels (absent ones scoring 0) or over the
    labels present in the kept pairs, which number is the task's leaderboard column, how it reads the
    gold answer, and for a binary F1 over all samples, its positive class (the other valid label
    being the negative one)."""

    script: str
    valid: tuple[str, ...] | None | Literal["nonempty"]
    over_valid_labels: bool
    headline: str
    gold: Callable[[str], str] = str  # how the script reads ``answer_gt`` (SD: the folder name)
    positive: str | None = None


def lower_stripped(label: str) -> str:
    return label.lower().strip()


TASKS: dict[str, Task] = {
    "SED": Task("DESED_qwen2.5.py", LETTERS, False, "f1_macro"),
    "MC": Task("GTZAN_qwen2.5.py", LETTERS, True, "f1_macro"),
    "SCR": Task("race_qwen2.5.py", LETTERS, True, "f1_weighted"),
    "SER": Task("SLUE_qwen2.5.py", LETTERS, False, "f1_macro"),
    "ASC": Task("TAU_qwen2.5.py", None, False, "f1_macro", str.upper),
    "ER": Task("VESUS_qwen2.5.py", None, False, "f1_macro", str.upper),
    "SD": Task("HAD_qwen2.5.py", ("real", "fake"), False, "f1_fake", lower_stripped, "fake"),
    "SAR": Task("Vox_age_qwen2.5.py", None, True, "f1_macro", str.strip),
    "SGR": Task("Vox_qwen2.5.py", ("male", "female"), False, "f1_weighted", lower_stripped),
}


def classification_metrics(task: str | Task, golds: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """The metrics of a task (a key of ``TASKS``, or another script's rule) over all its samples' gold
    labels (the rule's ``gold`` of ``answer_gt``) and extracted labels, on a 0-1 scale:
    ``accuracy``, ``f1_macro`` and ``f1_weighted`` over the kept (valid) pairs, ``valid_samples``,
    ``total_samples``, ``correct_rate`` over all samples, and with a positive class ``f1_positive``
    (``binary_f1``; HAD's is also ``f1_fake``). With no valid pair the F1s and accuracy are 0, as the
    scripts return them."""
    rule = TASKS[task] if isinstance(task, str) else task
    if len(golds) != len(predictions) or not golds:
        raise ValueError(f"{rule.script}: need as many predictions as golds, at least one ({len(golds)}, {len(predictions)})")
    valid = rule.valid if rule.valid is not None else tuple(sorted(set(golds)))
    kept = [(g, p) for g, p in zip(golds, predictions) if (g and p if valid == NONEMPTY else g in valid and p in valid)]
    scores = {"accuracy": 0.0, "f1_macro": 0.0, "f1_weighted": 0.0}
    if kept:
        kept_golds, kept_predictions = [g for g, _ in kept], [p for _, p in kept]
        labels = list(valid) if rule.over_valid_labels else None
        scores = {
            "accuracy": accuracy(kept_golds, kept_predictions),
            "f1_macro": f1(kept_golds, kept_predictions, "macro", labels),
            "f1_weighted": f1(kept_golds, kept_predictions, "weighted", labels),
        }
    scores |= {
        "valid_samples": len(kept), "total_samples": len(golds),
        "correct_rate": sum(g == p for g, p in zip(golds, predictions)) / len(golds),
    }
    if rule.positive is not None:
        negative = next(label for label in rule.valid if label != rule.positive)
        scores["f1_positive"] = binary_f1(golds, predictions, rule.positive, negative)
        if rule.positive == "fake":
            scores["f1_fake"] = scores["f1_positive"]
    return scores


def binary_f1(golds: Sequence[str], predictions: Sequence[str], positive: str, negative: str) -> float:
    """The binary F1 of ``HAD_qwen2.5.py``'s summary (fake positive; Aero-1's VoxCeleb gender script
    has the same with female positive), from its counters over ALL samples: TP = positive answered
    positive, FP = negative not answered negative, FN = positive not answered positive. Unlike the
    other F1s, an unparsed answer counts here (as a miss)."""
    tp = sum(g == positive and p == positive for g, p in zip(golds, predictions))
    fp = sum(g == negative and p != negative for g, p in zip(golds, predictions))
    fn = sum(g == positive and p != positive for g, p in zip(golds, predictions))
    precision = tp / (tp + fp) if (tp + fp) > 0 else 0.0
    recall = tp / (tp + fn) if (tp + fn) > 0 else 0.0
    return 2 * (precision * recall) / (precision + recall) if (precision + recall) > 0 else 0.0


def standardize(text: str) -> str:
    """``standardize_text``: lower-case; ``.!?,;:"()[]{}`` become spaces; ``-`` and ``'`` are deleted
    (``well-known`` -> ``wellknown``, ``don't`` -> ``dont``); whitespace runs become one space."""
    text = re.sub(r"[.!?,;:\"()\[\]{}]", " ", text.lower())
    text = re.sub(r"[\-\']", "", text)
    return re.sub(r"\s+", " ", text).strip()


def wer(reference: str, hypothesis: str) -> float:
    """``calculate_wer``: word error rate in percent (word-level edit distance over the reference's
    words, as jiwer computes it) after ``standardize``; 100 when either side standardizes to ""."""
    ref, hyp = standardize(reference).split(), standardize(hypothesis).split()
    if not ref or not hyp:
        return 100.0
    return edit_distance(ref, hyp) / len(ref) * 100


def asr_metrics(references: Sequence[str], hypotheses: Sequence[str]) -> dict[str, float]:
    """``calculate_librispeech_metrics``: over the samples whose reference and hypothesis (the
    ``transcript``) are both non-empty, ``wer_mean`` (mean per-sample WER, %) and ``word_accuracy``
    = 100 - wer_mean, the leaderboard's ASR column; an empty transcript is dropped, not charged.
    ``wer_all`` is the mean over all samples (empty = 100), the running WER their script prints and
    the WER Aero-1's and Voxtral's scripts report; ``word_accuracy_all`` = 100 - wer_all."""
    if len(references) != len(hypotheses) or not references:
        raise ValueError(f"need as many hypotheses as references, at least one ({len(references)}, {len(hypotheses)})")
    scores = [wer(r, h) for r, h in zip(references, hypotheses) if r and h]
    wer_mean = float(np.mean(scores)) if scores else 100.0
    wer_all = sum(wer(r, h) for r, h in zip(references, hypotheses)) / len(references)
    return {
        "wer_mean": wer_mean, "word_accuracy": 100.0 - wer_mean if scores else 0.0, "valid_samples": len(scores),
        "total_samples": len(references), "wer_all": wer_all, "word_accuracy_all": 100.0 - wer_all,
    }
