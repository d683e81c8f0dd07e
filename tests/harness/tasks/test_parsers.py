"""Answer parsers: letters read only where the output clearly gives one, transcripts unwrapped,
MMAU token matching."""

from __future__ import annotations

import pytest

from kvprune.harness.tasks.benchmarks.mmau.parsers import parse_answer_span
from kvprune.harness.tasks.benchmarks.starbench.parsers import parse_starbench
from kvprune.harness.tasks.parsers import PARSERS, parse_choice, parse_raw, parse_transcript

SCENES = ("Airport", "Dog park", "Metro station", "Street")
HAD = ("real", "fake")
GENDER = ("Male", "Female")
SOUNDS = ("Speech", "Dog", "Car horn", "Bird")


@pytest.mark.parametrize("output, choices, expected", [
    # bare letter forms, any case, with brackets or trailing punctuation
    ("B", SCENES, "B"),
    ("b", SCENES, "B"),
    ("(B)", SCENES, "B"),
    ("B.", SCENES, "B"),
    ("  c)  ", SCENES, "C"),
    ("<D>", SCENES, "D"),
    ("**C**", SCENES, "C"),
    ("'b'", HAD, "B"),
    ("a", HAD, "A"),
    ("b.", GENDER, "B"),
    # declared answers
    ("Answer: B", SCENES, "B"),
    ("Answer: b", HAD, "B"),
    ("I think the answer is (B)", SCENES, "B"),
    ("The answer is b) Dog park", SCENES, "B"),
    ("The correct option is D.", SCENES, "D"),
    ("I choose option C because of the trains.", SCENES, "C"),
    ("A is correct.", SCENES, "A"),
    ("A. Airport\nB. Dog park\nAnswer: B", SCENES, "B"),
    ("Please select the correct answer (A, B, C, or D). The answer is B", SCENES, "B"),
    # a letter opening the output, or on the last line
    ("B. Dog park", SCENES, "B"),
    ("a. real", HAD, "A"),
    ("A. Airport\nB. Dog park\n\nB", SCENES, "B"),
    ("C\nThe trains give it away.", SCENES, "C"),
    # ambiguous letters give no answer (and no fallback to option text)
    ("Both A and C", SCENES, None),
    ("The answer is A or C", SCENES, None),
    ("A. Airport B. Dog park", SCENES, None),
    # 'A' as an article, 'a' as a word: not letters; option text decides
    ("A dog is barking", SCENES, None),
    ("A dog is barking", SOUNDS, "B"),
    ("A train arrives at the metro station", SCENES, "C"),
    ("It is a male voice.", GENDER, "A"),
    ("It is a female voice.", GENDER, "B"),
    ("The audio is fake.", HAD, "B"),
    ("The answer is a dog park", SCENES, "B"),
    ("I'd say it's a street", SCENES, "D"),
    # option text must single out one option
    ("Dog park", SCENES, "B"),
    ("it is not real, it is fake", HAD, None),
    ("Sounds like an airport street", SCENES, None),
    ("No idea.", SCENES, None),
    ("", SCENES, None),
    # letters beyond the choices mean nothing
    ("C", HAD, None),
    ("E) Elderly (71+)", ("Young", "Adult", "Middle", "Senior", "Elderly (71+)"), "E"),
])
def test_multiple_choice(output, choices, expected):
    assert parse_choice(output, choices) == expected


def test_longest_option_text_wins():
    genres = ("Rock", "Punk Rock", "Jazz", "Pop")
    assert parse_choice("This is punk rock.", genres) == "B"
    assert parse_choice("This is rock.", genres) == "A"
    assert parse_choice("Rock or jazz", genres) is None


@pytest.mark.parametrize("output, expected", [
    ('Spoken Content: "He hoped there would be stew for dinner."', "He hoped there would be stew for dinner."),
    ("spoken content: he hoped", "he hoped"),
    ("Sure! Here is the transcription:\n\nHe hoped.", "He hoped."),
    ("Transcript: “quoted”", "quoted"),
    ("He hoped there would be stew.", "He hoped there would be stew."),
    ("Spoken Content: <transcribed text here>", None),
    ("   ", None),
])
def test_transcript(output, expected):
    assert parse_transcript(output) == expected


def test_parsers_are_registered_by_name():
    assert PARSERS.get("multiple_choice") is parse_choice
    assert PARSERS.get("transcript") is parse_transcript
    assert PARSERS.get("raw") is parse_raw and PARSERS.get("answer_span") is parse_answer_span
    assert PARSERS.get("starbench") is parse_starbench
    assert "token_match" not in PARSERS  # MMAU/MMAR score the raw reply with string_match (metric), no letters
