"""AVI-Bench ASQA and AMIC scoring, each expectation worked out by hand from the official evaluator
(eval/level_metrics/level_score.py, utils.py, data_utils.py); the reasoning is beside each case."""

from __future__ import annotations

import math

import pytest

from kvprune.harness.tasks.benchmarks.avibench.rules import (
    clean,
    constants,
    conversation,
    counting_score,
    full_match,
    ordered_matches,
    score_amic,
    score_full_match,
    text_input,
)


def entry(entry_id, answer, options="options_yes_no", text="Q?", task="ASQA", prompt=None):
    question = {"prompt": prompt, "text": text, "options": options}
    media = {"question": question, "audio_list": ["./input/wavs/a.wav"]}
    return {"id": entry_id, "task": task, "subtask": None, "input": media, "output": {"question_answer": answer}}


def test_constants_hold_the_audio_task_tables():
    assert constants()["ASQA"]["options_yes_no"] == ["yes", "no", "not sure"]
    assert constants()["AMIC"]["amic_cls_list"][:3] == ["bus", "hair-dryer", "pipa"]
    assert len(constants()["AMIC"]["amic_cls_list"]) == 46


def test_prompt_text_and_conversation():
    # prompt null -> "", options resolved and written as a Python list, then the question
    assert text_input(entry("1", "yes", text="Can you hear any sound?")) == (
        ". Available options are: ['yes', 'no', 'not sure']. Can you hear any sound?")
    assert text_input(entry("2", "4", options=None, text="How many beats?")) == ". . How many beats?"
    amic = text_input(entry("3", {"dog": 1}, options="amic_cls_list", text="Count.", task="AMIC", prompt="prompt_amic"))
    assert amic.startswith("There may be one or more sound-emitting objects in the provided audio. \n")
    assert ". Available options are: ['bus', 'hair-dryer', " in amic and amic.endswith("'no available option']. Count.")
    turns = conversation(entry("1", "yes"), "/data/levels/sensation/ASQA")
    assert turns[0] == {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]}
    assert turns[1]["content"][0] == {"type": "audio", "audio": "/data/levels/sensation/ASQA/input/wavs/a.wav"}
    assert turns[1]["content"][-1]["type"] == "text"


def test_cleaning_and_earliest_option():
    assert clean("**Yes**, it's LOUD!<|endoftext|>", clean_symbol=True) == "yes its loud"
    assert clean("{'dog': 1}<|endoftext|>", clean_symbol=False) == "{'dog': 1}"
    # "first" is mentioned before "last", whatever the reply means
    assert ordered_matches(["first", "last", "same", "not sure"], "Not the first, the last one.") == ["first", "last"]
    # whole words only: "no" is not inside "not sure" or "nothing"
    assert ordered_matches(["yes", "no", "not sure"], "not sure, nothing") == ["not sure"]
    # two options found at the same place sort by their text
    assert ordered_matches(["red apple", "red"], "a red apple") == ["red", "red apple"]
    # a plain string is searched character by character
    assert ordered_matches("ab", "b a") == ["b", "a"]


@pytest.mark.parametrize(
    ("prediction", "label", "score"),
    [
        ("yes", "yes", 1),
        ("i count 4 beats not 40", "4", 1),  # the first digit run is "4"
        ("i hear 40 beats", "4", 0),  # "40" != "4"
        ("1 2 twelve", "12", 0),  # the first digit run is "1"
        ("four", "4", 0),  # words are not numbers (the LLM refine step would have converted it)
        ("yes", "Yes", 0),  # labels are not cleaned: case matters
    ],
)
def test_full_match(prediction, label, score):
    assert full_match(prediction, label) == score


def test_asqa_double_confirm():
    entries = [
        entry("00000", "yes"),  # "Yes, I can hear it." -> "yes i can hear it" -> option "yes": 1
        entry("00001", "last", options="options_sound_volume"),  # "first" is named first: 0
        entry("00002", "4", options=None),  # no options; first number 4: 1
        entry("00003", "12", options=None),  # first number 1: 0
        entry("00004", "yes"),  # no reply: skipped, counts neither way
        entry("pre_00000", "yes"),  # wrong pre answer: zeroes formal 00000
        entry("pre_00001", "yes", text=None),  # null question: ignored, although wrong
        entry("pre_00002", "yes"),  # right pre answer: 00002 keeps its point
    ]
    replies = ["Yes, I can hear it.", "Not the first, the last one.", "I count 4 beats, not 40.", "1 2 twelve", None,
               "No.", "no", "yes"]
    # formal scores 1, 0, 1, 0 -> 0.5; with double confirm 00000 drops to 0 -> 1/4
    assert score_full_match(entries, replies) == 0.25
    assert score_full_match(entries, replies, double_confirm=False) == 0.5


def test_a_pre_question_before_its_formal_entry_cannot_zero_it():
    entries = [entry("pre_00009", "yes"), entry("00009", "no")]
    assert score_full_match(entries, ["no", "no"]) == 1.0  # the wrong pre answer came first
    with pytest.raises(ValueError, match="no formal entry"):
        score_full_match(entries, [None, None])


def amic(entry_id, gold):
    return entry(entry_id, gold, options="amic_cls_list", task="AMIC", prompt="prompt_amic")


def test_amic_semantic_f1_and_counting():
    entries = [amic("0", {"dog": 2, "cat": 1}), amic("1", {"piano": 4}), amic("2", {"male": 3, "female": 2}),
               amic("3", {"bird": 30}), amic("4", {"dog": 1})]
    replies = [
        "answer={'dog': 2, 'cat': 3}",  # prefix stripped, quotes swapped; same classes: F1 1; errors 0, 2 -> 1.0
        "{'piano': 4, 'man': 1}",  # F1 2*1/(2+1) = 2/3; error 0
        "two men talking",  # not JSON: F1 0; errors = the gold counts 3, 2 -> 2.5
        "{'bird': 1}",  # F1 1; error 29, capped at 20
        "{'cat': 1}",  # F1 0; dog not predicted: error 7
    ]
    semantic = (1 + 2 / 3 + 0 + 1 + 0) / 5
    rmse = math.sqrt((1.0**2 + 0**2 + 2.5**2 + 20**2 + 7**2) / 5)  # sqrt(91.25)
    counting = 1 - math.tanh(0.3 * rmse)
    assert score_amic(entries, replies) == (round((semantic + counting) / 2, 5), round(semantic, 5), round(counting, 5))
    assert counting_score(0.0) == 1.0 and counting_score(float("nan")) == 0.0


def test_amic_count_error_after_a_parse_failure_keeps_earlier_errors():
    # gold {"dog": 5, "cat": 2}, reply {"cat": "x"}: dog missing -> 7; int("x") fails -> the gold
    # counts 5, 2 are appended after it: mean (7 + 5 + 2) / 3. Keys: F1 2*1/(1+2) = 2/3.
    result = score_amic([amic("0", {"dog": 5, "cat": 2})], ["{'cat': 'x'}"])
    counting = 1 - math.tanh(0.3 * (14 / 3))
    assert result == (round((2 / 3 + counting) / 2, 5), round(2 / 3, 5), round(counting, 5))
    # gold order reversed: int("x") fails first -> errors 2, 5 only: mean 3.5
    assert score_amic([amic("0", {"cat": 2, "dog": 5})], ["{'cat': 'x'}"])[2] == round(1 - math.tanh(0.3 * 3.5), 5)


def test_amic_long_or_unparsed_replies():
    entries = [amic("0", {"dog": 1}), amic("1", {"cat": 2})]
    long_reply = "{" + ", ".join(f"'c{i}': 1" for i in range(40)) + "}"  # 300+ characters: left out of both scores
    assert len(long_reply) >= 300
    assert score_amic(entries, [long_reply, "{'cat': 2}"]) == (1.0, 1.0, 1.0)
    # nothing parses: semantic 0, and then counting is forced to 0 as well
    assert score_amic(entries, ["dog", "```json\n{'cat': 2}\n```"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="no entry has a reply"):
        score_amic(entries, [None, None])
