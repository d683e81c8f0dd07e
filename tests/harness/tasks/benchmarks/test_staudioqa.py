"""Provisional ST-AudioQA metrics against values worked out by hand."""

from __future__ import annotations

import pytest

from kvprune.harness.tasks.benchmarks.staudioqa.rules import (
    FAMILIES,
    answer_accuracy,
    compositional_average,
    event_map,
    label_set,
    normalize_answer,
    parse_yes_no,
    yes_no_accuracy,
)


def test_answer_normalisation_and_yes_no():
    assert normalize_answer("  Back-right. ") == "back-right"
    assert normalize_answer("2.0--2.5 m") == "2.0--2.5 m"
    assert parse_yes_no("Yes, it is.") == "yes"
    assert parse_yes_no("No.") == "no"
    assert parse_yes_no("Not sure") is None  # "not" is not "no"
    assert yes_no_accuracy(["yes", "no", "yes"], ["Yes, it is.", "no", "maybe"]) == pytest.approx(200 / 3)
    assert answer_accuracy(["back-right", "clockwise"], ["Back-right.", "counterclockwise"]) == 50.0


def test_event_map_over_label_sets():
    assert label_set("Dog bark; clapping, siren", ["dog bark", "clapping"]) == {"dog bark", "clapping"}
    golds = [{"dog"}, {"dog", "cat"}, {"cat"}, set()]
    predicted = [{"dog"}, {"cat"}, {"dog"}, {"car"}]
    # dog: relevant 1,1,0,0, predicted 1,0,1,0: threshold 1 -> P 1/2, R 1/2; threshold 0 -> P 2/4, R 1
    #   AP = 1/2 * 1/2 + 1/2 * 1/2 = 1/2
    # cat: relevant 0,1,1,0, predicted 0,1,0,0: threshold 1 -> P 1, R 1/2; then P 2/4, R 1 -> AP 3/4
    # car: in no gold set -> left out.  mAP = (1/2 + 3/4) / 2 = 62.5 %
    assert event_map(golds, predicted, ["dog", "cat", "car"]) == 62.5
    with pytest.raises(ValueError, match="no class occurs"):
        event_map([set()], [{"dog"}], ["dog"])


def test_compositional_average():
    accuracies = dict(zip(FAMILIES["C"], (86.0, 55.8, 60.6)))
    assert compositional_average(accuracies) == pytest.approx((86.0 + 55.8 + 60.6) / 3)
    with pytest.raises(ValueError, match="missing"):
        compositional_average({"temporal relation change": 1.0})
