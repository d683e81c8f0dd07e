"""The shared F1 / average-precision arithmetic against values worked out by hand."""

from __future__ import annotations

import pytest

from kvprune.harness.scoring.classification import accuracy, average_precision, f1, set_f1

GOLDS = ["A", "A", "A", "B", "B", "C"]
PREDICTIONS = ["A", "A", "B", "B", "B", "A"]
# A: tp 2, gold 3, predicted 3 -> 2*2/6 = 2/3; B: tp 2, gold 2, predicted 3 -> 4/5; C: tp 0 -> 0


def test_macro_and_weighted_f1():
    assert f1(GOLDS, PREDICTIONS, "macro") == pytest.approx((2 / 3 + 4 / 5 + 0) / 3)
    assert f1(GOLDS, PREDICTIONS, "weighted") == pytest.approx((3 * 2 / 3 + 2 * 4 / 5 + 1 * 0) / 6)
    assert accuracy(GOLDS, PREDICTIONS) == pytest.approx(4 / 6)


def test_explicit_labels_add_absent_ones_and_ignore_others():
    # D never occurs: F1 0 in the macro mean; C is not listed: left out
    assert f1(GOLDS, PREDICTIONS, "macro", labels=["A", "B", "D"]) == pytest.approx((2 / 3 + 4 / 5 + 0) / 3)
    # weights count only listed labels' golds: (3 * 2/3 + 2 * 4/5) / 5
    assert f1(GOLDS, PREDICTIONS, "weighted", labels=["A", "B", "D"]) == pytest.approx((2 + 8 / 5) / 5)
    assert f1(["A"], ["A"], "weighted", labels=["B"]) == 0.0  # no gold of a listed label
    with pytest.raises(ValueError, match="'micro'"):
        f1(GOLDS, PREDICTIONS, "micro")


def test_set_f1():
    assert set_f1({"dog", "man"}, {"dog"}) == pytest.approx(2 / 3)
    assert set_f1(set(), {"dog"}) == 0.0
    with pytest.raises(ValueError, match="undefined"):
        set_f1(set(), set())


def test_average_precision():
    # ranked scores 0.9 (relevant), 0.8 (not), 0.7 (relevant): P@1 = 1 at R 1/2, P@3 = 2/3 at R 1
    assert average_precision([True, False, True], [0.9, 0.8, 0.7]) == pytest.approx(1 / 2 + 1 / 2 * 2 / 3)
    assert average_precision([True, False, False, True], [0, 0, 0, 0]) == 0.5  # one threshold: prevalence
    with pytest.raises(ValueError, match="relevant"):
        average_precision([False], [1.0])
