"""Answer parsers: turn a model's free text into what a task scores, registered by name.

Every parser is ``parser(output, choices) -> str | None``: a choice letter ("A", "B", ...) or a
transcript, ``None`` when the output holds no answer it can trust (scored as wrong).

``multiple_choice`` reads a letter the way a careful grader would, and refuses to guess:

1. The whole output, or its last line, is a letter form: ``B``, ``b``, ``(B)``, ``B.``, ``'b'``, ``<B>``.
2. Otherwise it collects the letters the output *mentions* and the letters it *declares*:
   - mentioned: an upper-case letter standing alone (``I think B``), any letter closed by a bracket or
     quote (``(b)``, ``b)``, ``'b'``), or a letter opening the output before ``.``/``)``/``:``
     (``b. fake``, ``A: Blues``). A capital ``A`` (or ``I``) followed by a lower-case word other
     than and/or/nor/is/was is a word (``A dog barks``), not a letter; a lone lower-case letter
     inside a sentence is never one (``it is a male voice``).
   - declared: a letter after answer words (``answer is (B)``, ``Answer: b``, ``option C``,
     ``I choose D``) or before ``is correct/right/the answer``; a lower-case one must end the phrase
     (``answer is b.``, not ``answer is a dog``); one followed by ``or``/``and``/``,`` and another
     letter (``answer is A or C``) does not count.
   If the mentioned and declared letters are one letter, that is the answer; if several letters are
   mentioned but exactly one is declared (``A. Male B. Female Answer: B``), the declared one is; any
   other mix of letters (``Both A and C``) is ambiguous: ``None``.
3. With no letter at all, the option texts decide, matched case-insensitively as whole words
   (``The audio is fake.`` -> the letter of ``fake``; ``female`` does not contain ``male``), longest
   option first so that ``Punk Rock`` does not also count as ``Rock``. Exactly one option must occur;
   negations are not understood (``not fake`` still names ``fake``).

Only letters within the sample's choices count (``C`` means nothing on a two-choice task).

The other parsers hand benchmarks' official scorers what they read: the reply itself (``raw``,
``answer_span``), STAR-Bench's letter (``starbench``), AudioMarathon's per-task label
(``audiomarathon_<task>``, its Qwen2.5-Omni scripts' extractors, and
``audiomarathon_<family>_<task>``, its scripts for Phi-4-MM, Aero-1 and Voxtral: a letter,
``real``/``fake``, an option's text, a transcript; ``""`` when they find nothing).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence

from kvprune.registry import Registry

from ..official import audiomarathon, audiomarathon_models, mmau, starbench

Parser = Callable[[str, Sequence[str]], str | None]
PARSERS: Registry[Parser] = Registry("parser")


def register_parser(name: str) -> Callable[[Parser], Parser]:
    """Make a parser available to task YAML files under ``name`` (a decorator)."""
    return PARSERS.register(name)


# -- multiple choice --------------------------------------------------------------------------------

_OPEN, _CLOSE = r"[(\[<'\"]", r"[)\]>'\"]"
# One letter, optionally bracketed or quoted, not part of a word (``I'd``, ``it's`` hold no letter).
_TOKEN = rf"(?<![\w'’])(?P<open>{_OPEN})?(?P<letter>[A-Za-z])(?P<close>{_CLOSE})?(?![\w'’])"
_TOKEN_RE = re.compile(_TOKEN)
_WHOLE = re.compile(rf"\s*{_OPEN}?\s*(?P<letter>[A-Za-z])\s*{_CLOSE}?\s*[.!:]?\s*")
_LEADING = re.compile(rf"\s*{_OPEN}?(?P<letter>[A-Za-z])(?:{_CLOSE}|[.:])(?=\s|$)")
_ANSWER_WORDS = r"\b(?:answer|option|choice|choose|chose|select|pick|go\s+with)\b"
_DECLARED_AFTER = re.compile(
    rf"{_ANSWER_WORDS}(?:\s+(?:is|would\s+be|should\s+be|will\s+be))?\s*[:=\-]?\s*(?:(?:option|choice)\s+)?{_TOKEN}",
    re.IGNORECASE,
)
_DECLARED_BEFORE = re.compile(rf"{_TOKEN}\s+is\s+(?:the\s+)?(?:correct|right|best|answer)\b", re.IGNORECASE)
_ALTERNATIVE = re.compile(rf"\s*(?:,|/|\bor\b|\band\b)\s*{_TOKEN}", re.IGNORECASE)
_LETTERS_THAT_ARE_WORDS = {"A", "I"}  # the article and the pronoun
_NOT_AFTER_WORD = {"and", "or", "nor", "is", "was"}  # "A and C", "A is correct": letters after all


@register_parser("multiple_choice")
def parse_choice(output: str, choices: Sequence[str]) -> str | None:
    """The letter of the chosen option, by the rules in this module's docstring."""
    letters = string.ascii_uppercase[: len(choices)]
    text = output.replace("*", "").replace("`", "").strip()  # markdown emphasis: **B**

    for candidate in (text, text.splitlines()[-1] if text else ""):
        whole = _WHOLE.fullmatch(candidate)
        if whole and whole["letter"].upper() in letters:
            return whole["letter"].upper()

    mentioned = _mentioned(text, letters)
    declared = _declared(text, letters)
    if len(mentioned | declared) == 1:
        return (mentioned | declared).pop()
    if len(declared) == 1:
        return declared.pop()
    if mentioned or declared:
        return None
    return _named_option(text, choices)


def _mentioned(text: str, letters: str) -> set[str]:
    found = {
        m["letter"].upper() for m in _TOKEN_RE.finditer(text) if _is_letter(m, text, letters, lower_ok=bool(m["close"]))
    }
    leading = _LEADING.match(text)
    if leading and leading["letter"].upper() in letters:
        found.add(leading["letter"].upper())
    return found


def _declared(text: str, letters: str) -> set[str]:
    found = set()
    for m in _DECLARED_AFTER.finditer(text):
        ends_phrase = bool(m["close"]) or re.match(r"\s*([.,;:!?]|$)", text[m.end():]) is not None
        if _is_letter(m, text, letters, lower_ok=ends_phrase) and not _ALTERNATIVE.match(text, m.end()):
            found.add(m["letter"].upper())
    for m in _DECLARED_BEFORE.finditer(text):
        if _is_letter(m, text, letters, lower_ok=bool(m["close"])):
            found.add(m["letter"].upper())
    return found


def _is_letter(match: re.Match, text: str, letters: str, lower_ok: bool) -> bool:
    """Whether a single-letter token is a choice letter rather than a word."""
    letter = match["letter"]
    if letter.upper() not in letters:
        return False
    if letter.islower():
        return lower_ok
    if letter in _LETTERS_THAT_ARE_WORDS and not match["close"]:
        next_word = re.match(r"\s+([a-z]\w*)", text[match.end("letter"):])
        return next_word is None or next_word[1] in _NOT_AFTER_WORD
    return True


def _named_option(text: str, choices: Sequence[str]) -> str | None:
    """The letter of the one option whose text occurs in ``text``, longest options first."""
    remaining, named = text.lower(), []
    for index in sorted(range(len(choices)), key=lambda i: -len(choices[i])):
        name = choices[index].strip().lower()
        pattern = rf"(?<!\w){re.escape(name)}(?!\w)"
        if name and re.search(pattern, remaining):
            named.append(index)
            remaining = re.sub(pattern, " ", remaining)
    return string.ascii_uppercase[named[0]] if len(named) == 1 else None


# -- speech recognition -----------------------------------------------------------------------------

# AudioMarathon asks for "Spoken Content: <transcribed text here>"; models also say "Transcript:".
_TRANSCRIPT_LABEL = re.compile(r"(?:spoken\s+(?:content|text)|transcription|transcript|content)\s*:", re.IGNORECASE)


@register_parser("transcript")
def parse_transcript(output: str, choices: Sequence[str] = ()) -> str | None:
    """The transcript after the first "Spoken Content:"-style label, without the prompt's
    placeholder or surrounding quotes; ``None`` when nothing is left."""
    label = _TRANSCRIPT_LABEL.search(output)
    text = output[label.end():] if label else output
    text = text.replace("<transcribed text here>", "").strip().strip("\"'“”‘’").strip()
    return text or None


# -- the reply itself, for scorers that read text (MMAU, MMAR, AVI-Bench, ST-AudioQA) ----------------


@register_parser("raw")
def parse_raw(output: str, choices: Sequence[str] = ()) -> str:
    """The whole reply: the official MMAU/MMAR, AVI-Bench and ST-AudioQA scorers read it as it is."""
    return output


@register_parser("answer_span")
def parse_answer_span(output: str, choices: Sequence[str] = ()) -> str:
    """The text of the last ``<answer>...</answer>`` in the reply, else the whole reply (ours, for
    reasoning models: MMAR's scripts take the final answer apart from the reasoning)."""
    return mmau.answer_span(output)


# -- STAR-Bench -------------------------------------------------------------------------------------


@register_parser("starbench")
def parse_starbench(output: str, choices: Sequence[str]) -> str | None:
    """STAR-Bench's ``parse_multi_choice_response`` with all its quirks (``starbench.parse_answer``):
    its ``"<X>"`` as the letter ``X``, ``None`` for its ``"Z"``. A lower-case letter after a keyword
    (``answer: b``) stays lower-case, so it never equals a gold letter, as there."""
    parsed = starbench.parse_answer(output, choices)
    return None if parsed == starbench.NO_ANSWER else parsed.strip("<>")


# -- AudioMarathon's per-task extraction (the audiomarathon protocol) --------------------------------


def _choice_fields(choices: Sequence[str]) -> dict[str, str]:
    """Options keyed as AudioMarathon's items key them: ``choice_a``, ``choice_b``..."""
    return {f"choice_{letter.lower()}": text for letter, text in zip(string.ascii_uppercase, choices)}


_AUDIOMARATHON = {
    "sed": lambda output, choices: audiomarathon.letter_desed(output),
    "mc": lambda output, choices: audiomarathon.letter_gtzan(output),
    "scr": lambda output, choices: audiomarathon.letter_race(output),
    "ser": lambda output, choices: audiomarathon.letter_slue(output),
    "asc": lambda output, choices: audiomarathon.letter_tau(output, choices),
    "er": lambda output, choices: audiomarathon.letter_vesus(output, _choice_fields(choices)),
    "sd": lambda output, choices: audiomarathon.label_had(output),
    "sar": lambda output, choices: audiomarathon.label_age(output, _choice_fields(choices)),
    "sgr": lambda output, choices: audiomarathon.label_gender(output, *choices[:2]),
    "asr": lambda output, choices: audiomarathon.transcript(output),
}
for _task, _extract in _AUDIOMARATHON.items():
    register_parser(f"audiomarathon_{_task}")(_extract)


# The other models' scripts (``official.audiomarathon_models``), by the kvprune family they ran.


def _reply(extract: Callable[[str], str]) -> Parser:
    return lambda output, choices: extract(output)


def _keyed(extract: Callable[[str, dict], str], count: int | None = None) -> Parser:
    """An extractor reading options keyed ``choice_a``... (the first ``count`` of them)."""
    return lambda output, choices: extract(output, _choice_fields(choices[:count]))


_LETTER, _FIRST_LETTER = _reply(audiomarathon.choice_letter), _reply(audiomarathon.letter_race)
_GENDER, _TRANSCRIPT = _reply(audiomarathon.label_gender), _reply(audiomarathon.clean_transcript)
_EMOTION = _keyed(audiomarathon_models.emotion_choice)
_AUDIOMARATHON_MODELS = {
    "phi4_multimodal": {  # src/Phi4MM/Others/*_test.py
        "sed": _LETTER, "ser": _LETTER, "mc": _FIRST_LETTER, "scr": _FIRST_LETTER, "asc": audiomarathon.scene_letter,
        "er": _EMOTION, "sd": _reply(audiomarathon_models.authenticity_phi4),
        "sar": _keyed(audiomarathon_models.age_choice), "sgr": _GENDER,
    },
    "aero": {  # src/Aero-1/Others/*_test_aero.py, desed_aero1_test_sing_event.py
        "sed": _LETTER, "ser": _LETTER, "mc": _FIRST_LETTER, "scr": _FIRST_LETTER, "asc": audiomarathon.scene_letter,
        "er": _EMOTION, "sd": _reply(audiomarathon_models.authenticity_aero),
        "sar": _keyed(audiomarathon_models.age_choice, 4),  # its choice_e is commented out
        "sgr": _GENDER, "asr": _TRANSCRIPT,
    },
    "voxtral": {  # src/Voxtral/eval_*.py
        "sed": _LETTER, "ser": _LETTER, "er": _LETTER, "mc": audiomarathon_models.genre_voxtral,
        "scr": _reply(audiomarathon_models.race_voxtral), "asc": audiomarathon.scene_letter,
        "sd": _reply(audiomarathon_models.authenticity_voxtral), "sar": _keyed(audiomarathon_models.age_voxtral),
        "asr": _TRANSCRIPT,
    },
}
for _family, _extractors in _AUDIOMARATHON_MODELS.items():
    for _task, _extract in _extractors.items():
        register_parser(f"audiomarathon_{_family}_{_task}")(_extract)
