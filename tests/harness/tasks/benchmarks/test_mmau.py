"""MMAU/MMAR string_match and item files, against outcomes worked out by hand from the official rule:
tokens = set(re.findall(r"\\b\\w+\\b", text.lower())); right iff the prediction has a token, holds all
gold tokens and none of the tokens of options whose token set differs from the gold's (minus the
gold's tokens)."""

from __future__ import annotations

import pytest

from kvprune.harness.tasks.benchmarks.mmau.rules import (
    MMAR_TABLES,
    MMAU_TABLES,
    Item,
    accuracy_report,
    answer_span,
    read_items,
    string_match,
    tokenize,
)
from tests.support.paths import OFFICIAL_DATA

MMAU_FILE = OFFICIAL_DATA / "mmau-test-mini.json.gz"
MMAR_FILE = OFFICIAL_DATA / "MMAR-meta.jsonl.gz"


def test_tokens_ignore_case_punctuation_and_order():
    assert tokenize("Clip 2, clip 1!") == {"clip", "1", "2"}
    assert tokenize("don't") == {"don", "t"}  # the apostrophe splits the word
    assert tokenize("...") == set()


@pytest.mark.parametrize(
    ("prediction", "right"),
    [
        # gold "clip 1, clip 2" -> {clip, 1, 2}; option 2 has the same set so adds no incorrect token;
        # option 3 adds {3}. The reversed order holds every gold token and no 3: accepted.
        ("clip 2, clip 1", True),
        ("The order is clip 1 then clip 2.", True),  # extra words are fine if no option owns them
        ("clip 1, clip 2, clip 3", False),  # 3 is an incorrect token
        ("clip 1", False),  # 2 missing
        ("(A)", False),  # the letter is just the token "a"
        ("", False),  # no token at all
        ("?!", False),
    ],
)
def test_options_with_the_same_token_set_are_both_right(prediction, right):
    choices = ["clip 1, clip 2", "clip 2, clip 1", "clip 3"]
    assert string_match("clip 1, clip 2", prediction, choices) is right


def test_subset_options():
    choices = ["dog", "dog barking"]
    # gold "dog": incorrect = {dog, barking} - {dog} = {barking}
    assert string_match("dog", "A dog.", choices)
    assert not string_match("dog", "dog barking", choices)
    # gold "dog barking": incorrect = {dog} - {dog, barking} = {} -> anything holding both tokens
    assert string_match("dog barking", "a dog is barking loudly", choices)
    assert not string_match("dog barking", "dog", choices)


def test_empty_option_adds_no_incorrect_token():
    choices = ["Entered", "Did not enter", ""]  # an MMAR item
    # gold {entered}; incorrect = {did, not, enter}; "" has no token
    assert string_match("Entered", "ENTERED!!!", choices)
    assert string_match("Entered", "I think he entered", choices)
    assert not string_match("Entered", "He did not enter", choices)


def test_a_letter_prediction_matches_only_a_one_letter_option():
    # options "A" and "B": gold {a}, incorrect {b}; "A" right, "The answer is A" too (no option owns
    # the other words), "A or B" wrong.
    assert string_match("A", "A", ["A", "B"])
    assert string_match("A", "The answer is A", ["A", "B"])
    assert not string_match("A", "A or B", ["A", "B"])


def test_answer_span_takes_the_last_tagged_answer():
    assert answer_span("<think>maybe dog</think><answer> cat </answer>") == " cat "
    assert answer_span("<answer>x</answer> then <ANSWER>y\nz</ANSWER>") == "y\nz"
    assert answer_span("no tags here") == "no tags here"


@pytest.mark.parametrize(("path", "count"), [(MMAU_FILE, 1000), (MMAR_FILE, 1000)])
def test_every_official_item_loads_and_its_gold_text_scores_right(path, count):
    items = read_items(path)
    assert len(items) == count
    assert len({item.id for item in items}) == count
    assert all(string_match(item.answer, item.answer, item.choices) for item in items)
    report = accuracy_report(items, {item.id: item.answer for item in items},
                             MMAU_TABLES if path == MMAU_FILE else MMAR_TABLES)
    assert report["total"] == (count, count, 100.0)


def test_official_files_hold_repeated_golds_and_empty_options():
    mmau, mmar = read_items(MMAU_FILE), read_items(MMAR_FILE)
    assert sum(len(item.gold_letters) > 1 for item in mmau) == 16  # gold text equal to 2+ options
    assert sum("" in item.choices for item in mmar) == 4
    twin = next(item for item in mmar if item.answer == "Mono first, stereo later")
    # same words, other order: the official scorer accepts the wrong ordering as right
    assert string_match(twin.answer, "Stereo first, mono later", twin.choices)


def test_accuracy_report_tables():
    def item(i, task, difficulty, sub):
        return Item(str(i), f"{i}.wav", "q", ("cat", "dog"), "cat",
                    {"task": task, "difficulty": difficulty, "sub-category": sub})

    items = [item(0, "sound", "easy", "x"), item(1, "sound", "hard", "x"), item(2, "music", "easy", None),
             item(3, "speech", "easy", "y")]
    predictions = {"0": "cat", "1": "dog", "2": "a cat"}  # item 3 has no prediction: skipped
    report = accuracy_report(items, predictions, MMAU_TABLES)
    assert report["total"] == (2, 3, pytest.approx(200 / 3))
    assert report["task"] == {"sound": (1, 2, 50.0), "music": (1, 1, 100.0), "speech": (0, 0, 0.0)}
    assert report["difficulty"] == {"easy": (2, 2, 100.0), "hard": (0, 1, 0.0), "medium": (0, 0, 0.0)}
    assert report["sub-category"] == {"x": (1, 2, 50.0)}  # item 2 has none, item 3 was skipped
    with pytest.raises(ValueError, match="task 'noise'"):
        accuracy_report([item(9, "noise", "easy", "x")], {"9": "cat"}, MMAU_TABLES)


def test_read_items_rejects_a_gold_outside_the_choices(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "audio_path": "a.wav", "question": "q", "choices": ["x", "y"], "answer": "z"}\n')
    with pytest.raises(ValueError, match="bad.jsonl item 0: answer 'z'"):
        read_items(path)
