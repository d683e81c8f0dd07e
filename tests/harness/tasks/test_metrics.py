"""Metrics against values worked out by hand."""

from __future__ import annotations

import pytest

from kvprune.harness.tasks.sample import Sample
from kvprune.harness.tasks.metrics import (
    METRICS,
    accuracy,
    all_runs_correct_rate,
    f1_score,
    normalize_transcript,
    word_errors,
)

def gold(answer: str) -> Sample:
    """A sample whose gold answer is ``answer`` (what per-sample scoring compares with)."""
    return Sample("s", (), "", (), answer)


# Six answers over three classes; the fourth is unparsed.
REFERENCES = ["A", "A", "A", "B", "B", "C"]
PREDICTIONS = ["A", "A", "B", None, "B", "A"]
# A: tp 2, predicted 3, gold 3 -> P 2/3, R 2/3, F1 2/3
# B: tp 1, predicted 2, gold 2 -> P 1/2, R 1/2, F1 1/2   (the unparsed B is a false negative)
# C: tp 0, predicted 0, gold 1 -> F1 0
MACRO = 100 * (2 / 3 + 1 / 2 + 0) / 3  # 38.89
WEIGHTED = 100 * (3 * 2 / 3 + 2 * 1 / 2 + 1 * 0) / 6  # 50.00


def test_accuracy():
    assert accuracy(PREDICTIONS, REFERENCES) == pytest.approx(100 * 3 / 6)


def test_f1_macro_and_weighted():
    assert f1_score(PREDICTIONS, REFERENCES, "macro") == pytest.approx(MACRO)
    assert f1_score(PREDICTIONS, REFERENCES, "weighted") == pytest.approx(WEIGHTED)


def test_unparsed_answers_lower_f1_instead_of_disappearing():
    """Dropping the unparsed answer (AudioMarathon's way) would give B an F1 of 2/3, not 1/2."""
    dropped = f1_score(PREDICTIONS[:3] + PREDICTIONS[4:], REFERENCES[:3] + REFERENCES[4:], "macro")
    assert dropped == pytest.approx(100 * (2 / 3 + 2 / 3 + 0) / 3)
    assert f1_score(PREDICTIONS, REFERENCES, "macro") < dropped


def test_a_predicted_class_without_references_counts_in_macro_only():
    # A: tp 1, predicted 1, gold 2 -> 2/3; D (never gold): 0, weight 0
    assert f1_score(["A", "D"], ["A", "A"], "macro") == pytest.approx(100 * (2 / 3 + 0) / 2)
    assert f1_score(["A", "D"], ["A", "A"], "weighted") == pytest.approx(100 * 2 / 3)


def test_f1_rejects_bad_input():
    with pytest.raises(ValueError, match="average"):
        f1_score(["A"], ["A"], "micro")
    with pytest.raises(ValueError, match="length mismatch"):
        f1_score(["A"], ["A", "B"], "macro")
    with pytest.raises(ValueError, match="nothing to score"):
        accuracy([], [])


def test_transcript_normalisation():
    assert normalize_transcript("Don't STOP, well-known “quotes”!  ") == ["dont", "stop", "well", "known", "quotes"]


@pytest.mark.parametrize("reference, hypothesis, errors", [
    ("the cat sat", "the cat sat", 0),
    ("the cat sat", "The cat, sat.", 0),
    ("the cat sat", "the bat sat", 1),  # substitution
    ("the cat sat", "the sat", 1),  # deletion
    ("the cat sat", "the cat sat down", 1),  # insertion
    ("the cat sat", "", 3),
    ("a b c d", "b c d e", 2),  # delete a, insert e
])
def test_word_errors(reference, hypothesis, errors):
    assert word_errors(reference, hypothesis) == (errors, len(reference.split()))


def test_corpus_wer_weighs_words_and_word_accuracy_weighs_samples():
    # 1 error in 2 words and 0 in 8: corpus WER 1/10 = 10 %; per-sample WERs 50 % and 0 %, mean 25 %.
    rows = [METRICS.get("wer").per_sample(h, gold(r)) for h, r in [("one", "one two"), ("a b c d e f g h", "a b c d e f g h")]]
    assert METRICS.get("wer").compute(rows) == pytest.approx(10.0)
    assert METRICS.get("word_accuracy").compute(rows) == pytest.approx(100 - 25.0)


def test_acr_counts_items_right_in_every_run():
    items = ["x", "x", "x", "y", "y", "y", "z", "z", "z"]
    correct = [1, 1, 1, 1, 0, 1, 0, 0, 0]
    assert all_runs_correct_rate(correct, items) == pytest.approx(100 / 3)
    assert all_runs_correct_rate([1, 0], ["x", "y"]) == pytest.approx(50.0)


def test_registered_metrics_reduce_rows():
    rows = [
        {"parsed": p, "reference": r, "item": str(i), **METRICS.get("accuracy").per_sample(p, gold(r))}
        for i, (p, r) in enumerate(zip(PREDICTIONS, REFERENCES))
    ]
    rows[3]["parsed"] = float("nan")  # how a missing answer comes back from a DataFrame
    assert METRICS.get("accuracy").compute(rows) == pytest.approx(50.0)
    assert METRICS.get("f1_macro").compute(rows) == pytest.approx(MACRO)
    assert METRICS.get("f1_weighted").compute(rows) == pytest.approx(WEIGHTED)
    assert METRICS.get("aa").compute(rows) == pytest.approx(50.0)
    assert METRICS.get("acr").compute(rows) == pytest.approx(50.0)  # one run per item: ACR = accuracy

    asr = [
        {"parsed": h, "reference": r, **METRICS.get("wer").per_sample(h, gold(r))}
        for h, r in [("one", "one two"), (None, "three four five six")]
    ]
    assert [row["wer"] for row in asr] == [50.0, 100.0]
    assert METRICS.get("wer").compute(asr) == pytest.approx(100 * 5 / 6)
    assert METRICS.get("word_accuracy").compute(asr) == pytest.approx(100 - 75.0)
    with pytest.raises(ValueError, match="empty reference"):
        METRICS.get("wer").per_sample("hello", gold("  "))
