"""The audiomarathon protocol's parsers for Phi-4-MM, Aero-1 and Voxtral against an independent
transcription of each answer extractor in AudioMarathon's scripts for them (DabDans/AudioMarathon at
c8f49f3, paths below): every parser must give what the script's function gives, on replies that
reach each of its rules, quirks included. The transcriptions follow the scripts line by line and
share nothing with kvprune's code."""

from __future__ import annotations

import re

import pytest

from kvprune.harness.tasks.benchmarks.audiomarathon.model_scripts import AGE_GROUPS, RULES
from kvprune.harness.tasks.benchmarks.audiomarathon.scores import classification_metrics
from kvprune.harness.tasks.parsers import PARSERS

SCENES = ["Airport - indoor", "Public square", "Metro station", "Street traffic"]
GENRES = ["Blues", "Jazz - swing", "Rock", "Pop"]
EMOTIONS = ["Angry", "Happy", "Sad", "Monotone"]
REPLIES = [
    "", "A", "b", " C ", "d.", "B) Jazz", "(c)", "e", "E. Elderly (71+)", "a", "b.", "Answer: b", "The answer is c",
    "option d", "choice a", "I pick the BIRD", "xyz", "hmm", "CAB", "Bb", "real", "fake", "The audio is fake.",
    "It is real, not fake", "authentic recording", "synthetic voice", "generated speech", "natural and genuine",
    "male", "female", "A female voice", "male and female", "Airport - indoor", "public square", "metro station sounds",
    "street traffic noise", "Jazz", "jazz - swing", "rock music", "I feel anger here", "joy", "sadness", "Monotone",
    "flat delivery", "Senior (51-70)", "mid career (41-50)", "elderly (71+)", "Early Career", "the speaker is old",
    "Spoken Content: hello world", "Transcription: x. Transcription: y", "transcript: foo<sep>bar",
    "Spoken Content: <transcribed text here>", "hello there\nassistant\nB",
]


# -- the scripts' extractors, transcribed -----------------------------------------------------------


def extract_answer_choice(response):
    """src/Phi4MM/Others/{DESED,SLUE}_test.py, src/Aero-1/Others/{desed_aero1_test_sing_event,
    SLUE_test_aero}.py, src/Voxtral/eval_{DESED,SLUE,VESUS}.py: extract_answer_choice."""
    if not response:
        return ""
    response = response.strip().upper()
    if response in ["A", "B", "C", "D"]:
        return response
    match = re.search(r"\b([ABCD])\b", response)
    if match:
        return match.group(1)
    match = re.search(r"[(\[]?([ABCD])[)\].]?", response)
    if match:
        return match.group(1)
    return ""


def clean_text_response(response):
    """src/Phi4MM/Others/{gtzan,race}_test.py, src/Aero-1/Others/{gtzan,race}_test_aero.py."""
    if not response:
        return ""
    resp = response.strip().upper()
    for ch in resp:
        if ch in ["A", "B", "C", "D"]:
            return ch
    return resp.split()[0] if resp.split() else ""


def extract_acoustic_scene_answer(text, choices=None):
    """src/Phi4MM/Others/TAU_test.py, src/Aero-1/Others/TAU_test_aero.py, src/Voxtral/eval_TAU.py."""
    text_lower = text.lower().strip()
    options = ["a", "b", "c", "d"]
    if text_lower in options:
        return text_lower.upper()
    for opt in options:
        for pattern in [f"{opt}.", f"{opt})", f"{opt}:"]:
            if text_lower.startswith(pattern):
                return opt.upper()
    for opt in options:
        for indicator in [f"option {opt}", f"choice {opt}", f"{opt})"]:
            if indicator in text_lower:
                return opt.upper()
    if choices:
        best_match, max_overlap = None, 0
        for i, choice_text in enumerate(choices):
            choice_lower = choice_text.lower()
            if choice_lower in text_lower:
                return chr(65 + i)
            keywords = choice_lower.split(" - ")[0].split()
            overlap = sum(1 for kw in keywords if kw in text_lower)
            if overlap > max_overlap:
                max_overlap, best_match = overlap, chr(65 + i)
        if best_match and max_overlap > 1:
            return best_match
    return ""


def extract_emotion_answer(text, choices):
    """src/Phi4MM/Others/VESUS_test.py (and DART/VESUS_dart.py), src/Aero-1/Others/VESUS_test_aero.py."""
    text_lower = text.lower().strip()
    for letter in "abcd":
        if text_lower == letter or text_lower.startswith(f"{letter}.") or text_lower.startswith(f"{letter})"):
            return letter.upper()
    option_patterns = {x.upper(): [f"option {x}", f"choice {x}", f"{x})", f"({x})"] for x in "abcd"}
    for option, patterns in option_patterns.items():
        if any(pattern in text_lower for pattern in patterns):
            return option
    emotion_keywords = {
        "angry": ["anger", "frustrated", "mad", "furious"],
        "happy": ["joy", "cheerful", "pleased", "delighted"],
        "sad": ["sadness", "melancholy", "depressed", "sorrow"],
        "fearful": ["fear", "anxiety", "scared", "afraid"],
        "monotone": ["flat", "emotionless", "neutral", "bland"],
    }
    for choice_key in ["choice_a", "choice_b", "choice_c", "choice_d"]:
        if choice_key in choices:
            choice_text = choices[choice_key].lower()
            for emotion, keywords in emotion_keywords.items():
                if emotion in choice_text or any(keyword in choice_text for keyword in keywords):
                    if any(keyword in text_lower for keyword in keywords) or emotion in text_lower:
                        return choice_key[-1].upper()
    return ""


def two_option_answer(text, choice_a, choice_b, words):
    """src/Phi4MM/Others/HAD_test.py: extract_authenticity_answer (real, fake) and src/Phi4MM/Others/
    Vox_test.py, src/Aero-1/Others/Vox_test_aero.py: extract_gender_answer (male, female), the same
    code but for the last step's word patterns (``words``)."""
    text_lower = text.lower().strip()
    a, b = choice_a.lower().strip(), choice_b.lower().strip()
    if text_lower == "a" or text_lower.startswith("a.") or text_lower.startswith("a)"):
        return a
    if text_lower == "b" or text_lower.startswith("b.") or text_lower.startswith("b)"):
        return b
    if "option a" in text_lower or "choice a" in text_lower or "a)" in text_lower:
        return a
    if "option b" in text_lower or "choice b" in text_lower or "b)" in text_lower:
        return b
    if a in text_lower and b not in text_lower:
        return a
    if b in text_lower and a not in text_lower:
        return b
    a_match = re.search(words[0], text_lower) is not None
    b_match = re.search(words[1], text_lower) is not None
    if a_match and not b_match:
        return a
    if b_match and not a_match:
        return b
    return ""


def extract_authenticity_answer_phi4(text):
    return two_option_answer(text, "real", "fake", (r"\breal\b|\bauthentic\b|\bgenuine\b",
                                                     r"\bfake\b|\bartificial\b|\bsynthetic\b|\bsynthesized\b"))


def extract_gender_answer(text):
    return two_option_answer(text, "male", "female", (r"\bmale\b", r"\bfemale\b"))


def extract_authenticity_answer_aero(text):
    """src/Aero-1/Others/HAD_test_aero.py."""
    text_lower = text.lower().strip()
    if "real" in text_lower and "fake" not in text_lower:
        return "real"
    elif "fake" in text_lower and "real" not in text_lower:
        return "fake"
    if any(w in text_lower for w in ["authentic", "genuine", "natural"]) and \
            not any(w in text_lower for w in ["fake", "artificial", "synthetic"]):
        return "real"
    elif any(w in text_lower for w in ["artificial", "synthetic", "generated"]) and \
            not any(w in text_lower for w in ["real", "authentic", "genuine"]):
        return "fake"
    return ""


def extract_age_answer(text, choices, letters):
    """src/Phi4MM/Others/Vox_age_test.py (letters a-e), src/Aero-1/Others/Vox_age_test_aero.py (a-d:
    its choice_e lines are commented out, and its choices dict has no choice_e)."""
    text_lower = text.lower().strip()
    for x in letters:
        if text_lower == x or text_lower.startswith(f"{x}.") or text_lower.startswith(f"{x})"):
            return choices[f"choice_{x}"]
    for option, choice_text in choices.items():
        option_letter = option[-1].lower()
        if f"option {option_letter}" in text_lower or f"choice {option_letter}" in text_lower or f"{option_letter})" in text_lower:
            return choice_text
    choice_matches = [choice_text for choice_text in choices.values() if choice_text.lower() in text_lower]
    if len(choice_matches) == 1:
        return choice_matches[0]
    return ""


def extract_genre_answer(text, choices):
    """src/Voxtral/eval_GTZAN.py."""
    if not text:
        return ""
    text_lower = text.lower().strip()
    genre_map = {"a": choices[0], "b": choices[1], "c": choices[2], "d": choices[3]}
    answer_match = re.search(r"the answer is ([abcd])", text_lower)
    if answer_match:
        return answer_match.group(1).upper()
    answer_match = re.search(r"answer:\s*([abcd])", text_lower)
    if answer_match:
        return answer_match.group(1).upper()
    for letter in genre_map:
        if text_lower == letter or text_lower.startswith(f"{letter}.") or text_lower.startswith(f"{letter})"):
            return letter.upper()
    for letter in genre_map:
        if f"option {letter}" in text_lower or f"choice {letter}" in text_lower or f"{letter})" in text_lower:
            return letter.upper()
    for letter, genre in genre_map.items():
        if genre.lower() in text_lower:
            return letter.upper()
    for letter, genre in genre_map.items():
        genre_name = genre.split(" - ")[0].lower() if " - " in genre else genre.lower()
        if genre_name in text_lower:
            return letter.upper()
    return ""


def extract_race_answer(text):
    """src/Voxtral/eval_RACE.py, every rule (the later ones never fire: they all need an A-D character)."""
    if not text:
        return ""
    text_upper = text.strip().upper()
    for ch in text_upper:
        if ch in ["A", "B", "C", "D"]:
            return ch
    patterns = [r"ANSWER\s*IS\s*([ABCD])", r"CHOOSE\s*([ABCD])", r"OPTION\s*([ABCD])", r"([ABCD])\s*OPTION",
                r"([ABCD])\s*IS\s*CORRECT", r"CORRECT\s*ANSWER\s*IS\s*([ABCD])", r"I\s*CHOOSE\s*([ABCD])",
                r"([ABCD])\s*CORRECT", r"([ABCD])\s*RIGHT", r"([ABCD])\s*✓", r"([ABCD])\s*√"]
    for pattern in patterns:
        match = re.search(pattern, text_upper)
        if match:
            return match.group(1)
    for word in text_upper.split():
        if len(word) == 1 and word in ["A", "B", "C", "D"]:
            return word
        elif len(word) > 1 and any(ch in word for ch in ["A", "B", "C", "D"]):
            for ch in word:
                if ch in ["A", "B", "C", "D"]:
                    return ch
    return ""


def extract_had_letter(response):
    """src/Voxtral/eval_HAD.py: extract_answer_choice (a = real, b = fake in its loader)."""
    if not response:
        return ""
    response = response.strip().lower()
    if response in ["a", "b"]:
        return response
    match = re.search(r"\b([ab])\b", response)
    if match:
        return match.group(1)
    match = re.search(r"[(\[]?([ab])[)\].]?", response)
    if match:
        return match.group(1)
    if "real" in response and "fake" not in response:
        return "a"
    if "fake" in response and "real" not in response:
        return "b"
    return ""


def extract_age_choice_voxtral(response, choices):
    """src/Voxtral/eval_Vox_Age.py: extract_answer_choice."""
    if not response:
        return ""
    response = response.strip().lower()
    for x in "abcde":
        if response == x or response.startswith(f"{x}.") or response.startswith(f"{x})"):
            return choices.get(f"choice_{x}", "")
    match = re.search(r"\b([abcde])\b", response) or re.search(r"[(\[]?([abcde])[)\].]?", response)
    return choices.get(f"choice_{match.group(1)}", "") if match else ""


def clean_response(response):
    """src/Aero-1/Others/librispeech_test_aero.py: clean_response; src/Voxtral/eval_LibriSpeech.py:
    clean_asr_response (the same code)."""
    if not response or response.strip() == "":
        return ""
    for marker in ["spoken content:", "content:", "transcription:", "transcript:"]:
        if marker.lower() in response.lower():
            parts = re.split(re.escape(marker), response, flags=re.IGNORECASE)
            if len(parts) > 1:
                response = parts[1].strip()
                break
    response = re.sub(r"<transcribed text here>", "", response)
    response = re.sub(r"<sep>.*?($|<|$)", "", response)
    response = re.sub(r"(?i)^(spoken\s+(?:text|content)|content|transcript|transcription):\s*", "", response.strip())
    return response.strip()


def keyed(options, count=None):
    return {f"choice_{x}": text for x, text in zip("abcde", options[:count])}


CASES = {  # parser -> (the task's options, the script's extractor on a reply)
    **{f"audiomarathon_{f}_{t}": (EMOTIONS, extract_answer_choice)
       for f, t in [("phi4_multimodal", "sed"), ("phi4_multimodal", "ser"), ("aero", "sed"), ("aero", "ser"),
                    ("voxtral", "sed"), ("voxtral", "ser"), ("voxtral", "er")]},
    **{f"audiomarathon_{f}_{t}": (GENRES, clean_text_response)
       for f in ("phi4_multimodal", "aero") for t in ("mc", "scr")},
    **{f"audiomarathon_{f}_asc": (SCENES, lambda reply: extract_acoustic_scene_answer(reply, SCENES))
       for f in ("phi4_multimodal", "aero", "voxtral")},
    **{f"audiomarathon_{f}_er": (EMOTIONS, lambda reply: extract_emotion_answer(reply, keyed(EMOTIONS)))
       for f in ("phi4_multimodal", "aero")},
    "audiomarathon_phi4_multimodal_sd": (["real", "fake"], extract_authenticity_answer_phi4),
    "audiomarathon_aero_sd": (["real", "fake"], extract_authenticity_answer_aero),
    **{f"audiomarathon_{f}_sgr": (["Male", "Female"], extract_gender_answer) for f in ("phi4_multimodal", "aero")},
    "audiomarathon_phi4_multimodal_sar": (AGE_GROUPS, lambda reply: extract_age_answer(reply, keyed(AGE_GROUPS), "abcde")),
    "audiomarathon_aero_sar": (AGE_GROUPS, lambda reply: extract_age_answer(reply, keyed(AGE_GROUPS, 4), "abcd")),
    "audiomarathon_voxtral_mc": (GENRES, lambda reply: extract_genre_answer(reply, GENRES)),
    "audiomarathon_voxtral_scr": (GENRES, extract_race_answer),
    "audiomarathon_voxtral_sd": (["real", "fake"], lambda reply: {"a": "real", "b": "fake"}.get(extract_had_letter(reply), "")),
    "audiomarathon_voxtral_sar": (AGE_GROUPS, lambda reply: extract_age_choice_voxtral(reply, keyed(AGE_GROUPS))),
    **{f"audiomarathon_{f}_asr": ((), clean_response) for f in ("aero", "voxtral")},
}


def test_every_family_parser_has_its_scripts_extractor_here():
    families = ("phi4_multimodal", "aero", "voxtral")
    prefixes = tuple(f"audiomarathon_{family}_" for family in families)
    assert {name for name in PARSERS.names() if name.startswith(prefixes)} == set(CASES)


@pytest.mark.parametrize("parser", sorted(CASES))
def test_parser_equals_the_scripts_extractor(parser):
    options, script = CASES[parser]
    ours = PARSERS.get(parser)
    assert [ours(reply, tuple(options)) for reply in REPLIES] == [script(reply) for reply in REPLIES]


def test_quirks_the_scripts_define():
    """Worked by hand: what each script's extractor makes of replies a careful reader would not."""
    parse = {name: (lambda reply, n=name: PARSERS.get(n)(reply, tuple(CASES[n][0]))) for name in CASES}
    assert parse["audiomarathon_phi4_multimodal_sed"]("the BIRD") == "B"  # no standalone letter: any A-D character
    assert parse["audiomarathon_voxtral_sd"]("The audio is fake.") == "real"  # the "a" of "audio", before "fake" is read
    assert parse["audiomarathon_aero_sar"]("e") == ""  # Aero-1 never reads option e
    assert parse["audiomarathon_phi4_multimodal_sar"]("e") == "Elderly (71+)"
    assert parse["audiomarathon_voxtral_sar"]("the speaker is old") == "Elderly (71+)"  # the "e" of "the": any a-e
    assert parse["audiomarathon_phi4_multimodal_er"]("Monotone") == "D"  # the emotion's own name counts (not for Qwen)
    assert parse["audiomarathon_phi4_multimodal_scr"]("hmm") == "HMM"  # no A-D: the first word (an invalid label)
    assert parse["audiomarathon_voxtral_scr"]("hmm") == ""
    assert parse["audiomarathon_aero_sd"]("It is real, not fake") == ""  # both words: undecided


def test_scoring_rules_of_the_scripts():
    """Worked by hand from each script's metric code (paths in RULES)."""
    golds, predictions = [" b", "A", "c", "D"], ["B", "", "C", "A"]
    # Phi-4 DESED/SLUE: non-empty pairs, gold stripped and upper-cased: (B,B), (C,C), (D,A) -> accuracy 2/3
    phi4 = classification_metrics(RULES["SED:phi4_multimodal"], [RULES["SED:phi4_multimodal"].gold(g) for g in golds], predictions)
    assert (phi4["accuracy"], phi4["valid_samples"], phi4["correct_rate"]) == (pytest.approx(2 / 3), 3, 0.5)
    # Aero-1 VoxCeleb gender: binary F1, female positive, over all samples: TP 1, FP 1 (a male not answered male), FN 1
    aero = RULES["SGR:aero"]
    gender = classification_metrics(aero, ["female", "female", "male", "male"], ["female", "", "male", "female"])
    assert gender["f1_positive"] == pytest.approx(0.5) and "f1_fake" not in gender
    # Voxtral VoxCeleb age: only the five fixed groups count; "56+" is dropped
    age = classification_metrics(RULES["SAR:voxtral"], ["Senior (51-70)", "56+"], ["Senior (51-70)", "56+"])
    assert age["valid_samples"] == 1 and age["f1_weighted"] == 1.0
