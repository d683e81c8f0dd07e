"""AudioMarathon's extraction and metrics, each expectation worked out by hand from their Qwen2.5-Omni
scripts (src/Qwen_2.5_Omni/Others/*_qwen2.5.py) and pruning code; the reasoning is beside each case."""

from __future__ import annotations

import pytest

from kvprune.harness.tasks.benchmarks.audiomarathon.rules import (
    EXTRACTORS,
    frame_offsets,
    kept_count,
    label_age,
    label_gender,
    label_had,
    letter_desed,
    letter_gtzan,
    letter_race,
    letter_slue,
    letter_tau,
    letter_vesus,
    transcript,
)
from kvprune.harness.tasks.benchmarks.audiomarathon.scores import TASKS, asr_metrics, classification_metrics, standardize, wer


def test_pruning_arithmetic_truncates():
    assert kept_count(10, 0.7, "frame") == 3  # 10 * 0.30000000000000004 = 3.0000000000000004 -> 3
    assert kept_count(7, 0.5, "random") == 3  # int(3.5), where round() would give 4
    assert kept_count(10, 0.95, "fast_v") == 0  # int(0.5000000000000004): FastV has no floor at 1
    assert kept_count(10, 0.95, "frame") == 1
    assert frame_offsets(10, 3) == [0, 3, 6]  # step 10/3: int(0), int(3.33), int(6.67)
    assert frame_offsets(10, 4) == [0, 2, 5, 7]  # step 2.5
    assert frame_offsets(5, 5) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="fast_v, random, frame"):
        kept_count(10, 0.5, "dart")


@pytest.mark.parametrize(
    ("extract", "reply", "label"),
    [
        (letter_desed, "BIRD", "B"),  # no standalone letter: the first A-D character anywhere
        (letter_desed, "I think C.", "C"),  # standalone C
        (letter_desed, "a dog", "A"),  # upper-cased: "A DOG" -> standalone A
        (letter_desed, "yes", ""),  # no A-D character at all
        (letter_desed, "system\nassistant\nD", "D"),  # the text after the last "assistant\n"
        (letter_slue, "bad", "B"),  # 3 characters or fewer: the first one
        (letter_slue, "the cat", "C"),  # "THE CAT": first A-D character is C
        (letter_gtzan, "b) jazz", "B"),  # starts "B)"
        (letter_gtzan, "(c) Rock", "C"),  # lower-cased "c)" occurs
        (letter_race, "The answer is B", "A"),  # first A-D character: the A of "ANSWER"
        (letter_race, "yes", "YES"),  # no A-D character: the first word, later dropped as invalid
        (letter_race, "", ""),
    ],
)
def test_letter_extractors(extract, reply, label):
    assert extract(reply) == label


def test_tau_extraction():
    choices = ["airport - indoor", "metro station - underground", "park", "street traffic"]
    assert letter_tau("c: park", choices) == "C"  # starts "c:"
    assert letter_tau("the park", choices) == "C"  # the whole option text occurs
    # "metro" and "station" (the words before " - ") both occur: overlap 2 > 1
    assert letter_tau("I hear a metro station", choices) == "B"
    assert letter_tau("a street", choices) == ""  # overlap 1 is not enough
    assert letter_tau("hello", ["bus", "", "tram", "metro"]) == "B"  # an empty option occurs in any text


def test_vesus_extraction_by_synonyms_only():
    plain = {"choice_a": "angry", "choice_b": "happy", "choice_c": "sad", "choice_d": "neutral"}
    assert letter_vesus("(b)", plain) == "B"
    assert letter_vesus("The speaker sounds angry", plain) == ""  # "angry" is no synonym of its own group
    assert letter_vesus("neutral", plain) == "D"  # "neutral" is in the monotone group, and in option D
    assert letter_vesus("I made it up", {**plain, "choice_a": "furious"}) == "A"  # "mad" is inside "made"


@pytest.mark.parametrize(
    ("reply", "tokens", "label"),
    [
        ("b", 0, "fake"),
        ("I'd say a", 0, "real"),  # ends " a"
        ("The audio is real.", 0, "real"),  # "real" occurs, "fake" does not
        ("not fake, real", 0, ""),  # both occur, both as words: undecided
        ("it is synthetic", 0, "fake"),  # a fake synonym as a word
        # over 10 generated tokens, the first exact word real/fake/authentic/synthesized wins:
        # "fake?" is not exact, "real" is
        ("This is fake? No, real", 12, "real"),
        ("This is fake? No, real", 5, ""),
    ],
)
def test_had_extraction(reply, tokens, label):
    assert label_had(reply, tokens) == label


def test_gender_and_age_extraction():
    assert label_gender("Female") == "female"  # "male" is inside "female": decided by \bfemale\b
    assert label_gender("Male.") == "male"
    assert label_gender("b)") == "female"
    assert label_gender("male or female") == ""
    choices = {"choice_a": "18-25", "choice_b": "26-35", "choice_c": "36-45", "choice_d": "46-55", "choice_e": "56+"}
    assert label_age("b", choices) == "26-35"
    assert label_age("The answer is c", choices) == "36-45"  # ends " c"
    assert label_age("a or b", choices) == "26-35"  # ends " b", checked before "a or b" is found ambiguous
    assert label_age("Probably 26-35.", choices) == "26-35"  # exactly one option text occurs
    assert label_age("a, c", choices) == "36-45"  # ends " c"
    assert label_age("a and c?", choices) == ""  # two standalone letters, no option text


def test_transcript_and_wer():
    assert transcript("Spoken Content: hello world") == "hello world"
    assert transcript("Transcription: x. Transcription: y") == "x."  # only up to the marker's next occurrence
    assert transcript("transcript: foo<sep>bar") == "foo"
    assert transcript("Spoken Content: <transcribed text here>") == ""
    assert standardize("The well-known cat's HAT!") == "the wellknown cats hat"
    assert wer("a b c", "a x c d") == pytest.approx(200 / 3)  # one substitution, one insertion over 3 words
    assert wer("a b", "...") == 100.0  # the hypothesis standardizes to nothing
    # sample 2's transcript is empty: dropped from the mean (word accuracy 100 - 50), charged 100 in wer_all
    scores = asr_metrics(["hello world", "a b"], ["hello word", ""])
    assert scores == {"wer_mean": 50.0, "word_accuracy": 50.0, "valid_samples": 1, "total_samples": 2, "wer_all": 75.0,
                      "word_accuracy_all": 25.0}


def test_unparsed_answers_are_dropped_and_label_sets_differ_by_script():
    golds, predictions = ["A", "A", "B", "B"], ["A", "", "B", "A"]
    # kept: (A,A), (B,B), (B,A). A: tp 1, gold 1, predicted 2 -> 2/3; B: tp 1, gold 2, predicted 1 -> 2/3
    sed = classification_metrics("SED", golds, predictions)  # labels present: A, B
    assert sed["f1_macro"] == pytest.approx(2 / 3) and sed["f1_weighted"] == pytest.approx(2 / 3)
    assert sed["accuracy"] == pytest.approx(2 / 3) and sed["correct_rate"] == 0.5 and sed["valid_samples"] == 3
    mc = classification_metrics("MC", golds, predictions)  # always over A-D: C and D add F1 0
    assert mc["f1_macro"] == pytest.approx((2 / 3 + 2 / 3) / 4) and mc["f1_weighted"] == pytest.approx(2 / 3)


def test_valid_labels_are_the_golds_seen_for_scenes_and_ages():
    # TAU: valid = {A, B} (the golds); the wrong letter C and "ERROR" are dropped: one pair (B, B) left
    tau = classification_metrics("ASC", ["A", "B", "B"], ["C", "B", "ERROR"])
    assert (tau["f1_macro"], tau["valid_samples"], tau["correct_rate"]) == (1.0, 1, pytest.approx(1 / 3))
    # ages: a prediction outside the golds' groups is dropped; F1 over the sorted gold groups
    age = classification_metrics("SAR", ["18-25", "18-25", "26-35"], ["18-25", "56+", "26-35"])
    assert age["f1_macro"] == 1.0 and age["valid_samples"] == 2
    assert classification_metrics("SED", ["A"], [""])["f1_macro"] == 0.0  # nothing valid: zeros


def test_had_fake_f1_counts_unparsed_answers():
    golds, predictions = ["real", "real", "fake", "fake"], ["real", "", "fake", "real"]
    had = classification_metrics("SD", golds, predictions)
    # TP 1 (fake->fake); FP 1 (the unparsed real); FN 1 (fake->real): P = R = 1/2 -> F1 1/2
    assert had["f1_fake"] == 0.5
    # kept pairs (real,real), (fake,fake), (fake,real): real 2*1/(1+2), fake 2*1/(2+1)
    assert had["f1_macro"] == pytest.approx(2 / 3)


def test_task_table():
    assert set(TASKS) | {"ASR"} == set(EXTRACTORS)
    assert TASKS["ASC"].gold("a") == "A" and TASKS["SGR"].gold(" Male ") == "male"
    assert {task: rule.headline for task, rule in TASKS.items()}["SD"] == "f1_fake"
