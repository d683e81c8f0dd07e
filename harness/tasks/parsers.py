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

``raw`` hands benchmarks' official scorers the reply itself. A benchmark's own parsers are in its
folder (``benchmarks/<name>/parsers.py``): MMAU's ``answer_span``, STAR-Bench's letter
(``starbench``), AudioMarathon's per-task labels (``audiomarathon_<task>``, ``audiomarathon_<family>_<task>``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence

from kvprune.registry import Registry


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
