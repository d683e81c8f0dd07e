"""AudioMarathon's answer extraction, reproduced from DabDans/AudioMarathon ``src/Qwen_2.5_Omni/Others/*_qwen2.5.py``
(one script per task), and ``src/Modeling/modeling_qwen2_5_omni_fastv.py`` (how many audio tokens a
pruning ratio keeps, and which ones "frame" keeps). The scripts' scoring is ``scores``;
the other models' scripts (Phi-4-MM, Aero-1, Voxtral) are ``model_scripts``.

Each task's extractor turns the decoded reply into the label its script compares with the gold one:
a letter (SED, MC, SCR, SER, ASC, ER), ``real``/``fake`` (SD), ``male``/``female`` (SGR), an age
group's text (SAR) or a transcript (ASR); ``""`` when nothing is found. The Qwen scripts decode the
prompt with the reply and cut the reply out after the last ``"assistant\\n"`` (``after_assistant``);
the other models' scripts decode the reply alone, so their extractors start from the shared cores
here without that cut (``choice_letter``, ``scene_letter``, ``clean_transcript``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from kvprune import keep_rules
from kvprune.keep_rules import keep_count

LETTERS = ("A", "B", "C", "D")
ASSISTANT = "assistant\n"


# -- pruning arithmetic -----------------------------------------------------------------------------


def kept_count(n_tokens: int, ratio: float, method: str) -> int:
    """Audio tokens kept of a span of ``n_tokens`` (their span runs from the audio BOS to the audio
    EOS marker, both included): ``max(1, int(n * (1 - ratio)))`` for ``random`` and ``frame``
    (kvprune's ``keep_rule="floor"``); ``fast_v`` takes the top ``int(n * (1 - ratio))``, with no
    floor at 1."""
    if method not in ("fast_v", "random", "frame"):
        raise ValueError(f"unknown pruning method {method!r}; AudioMarathon's are fast_v, random, frame")
    if method == "fast_v":
        return int(n_tokens * (1 - ratio))
    return keep_count(n_tokens, ratio, "floor")


def frame_offsets(n_tokens: int, kept: int) -> list[int]:
    """Offsets in the span that ``frame`` keeps: ``int(i * (n / k))`` for ``i < k`` (the float step
    first, then the product; kvprune's ``frame`` press with ``keep_rule="floor"``), or every offset
    when ``k >= n``."""
    return list(range(n_tokens)) if kept >= n_tokens else keep_rules.frame_offsets(n_tokens, kept, "floor")


# -- answer extraction ------------------------------------------------------------------------------


def after_assistant(text: str) -> str:
    """What follows the last ``"assistant\\n"``, stripped; the text unchanged if there is none. Their
    scripts that decode prompt and reply together cut the reply out this way."""
    return text[text.rfind(ASSISTANT) + len(ASSISTANT):].strip() if ASSISTANT in text else text


def _bare_or_any_letter(text: str) -> str:
    """A standalone A-D, else the first A-D anywhere (``[(\\[]?([ABCD])[)\\].]?`` needs no bracket)."""
    match = re.search(r"\b([ABCD])\b", text) or re.search(r"[(\[]?([ABCD])[)\].]?", text)
    return match[1] if match else ""


def choice_letter(reply: str) -> str:
    """``extract_answer_choice`` as the scripts that decode the reply alone have it: upper-cased, the
    whole reply if it is a letter, else a standalone letter, else ANY A-D character (``"BIRD"`` -> B)."""
    text = reply.strip().upper()
    return text if text in LETTERS else _bare_or_any_letter(text)


def letter_desed(reply: str) -> str:
    """SED, ``DESED_qwen2.5.py: extract_answer_choice``: ``choice_letter`` of the reply after the
    ``assistant`` cut."""
    return choice_letter(after_assistant(reply))


def letter_slue(reply: str) -> str:
    """SER, ``SLUE_qwen2.5.py: extract_answer_choice``: like ``letter_desed``, but a reply of at most
    3 characters answers by its first letter (``"AB"`` -> A). Their last rule, ``(?:option|choice)\\s+``
    on the upper-cased reply, can never match."""
    text = reply.strip().upper()
    if text in LETTERS:
        return text
    if len(text) <= 3 and text[:1] in LETTERS:
        return text[0]
    return _bare_or_any_letter(text)


def letter_gtzan(reply: str) -> str:
    """MC, ``GTZAN_qwen2.5.py: extract_gtzan_answer``: upper-cased; for A, then B, C, D: the reply is
    the letter, starts ``X.``/``X)`` or ends ``" X"``; then, lower-cased, ``option x``, ``choice x``
    or ``x)`` anywhere; then a standalone letter; then any A-D character."""
    text = after_assistant(reply).strip().upper()
    for letter in LETTERS:
        if text == letter or text.startswith((f"{letter}.", f"{letter})")) or text.endswith(f" {letter}"):
            return letter
    lower = text.lower()
    for letter in LETTERS:
        x = letter.lower()
        if f"option {x}" in lower or f"choice {x}" in lower or f"{x})" in lower:
            return letter
    return _bare_or_any_letter(text)


def letter_race(reply: str) -> str:
    """SCR, ``race_qwen2.5.py: clean_text_response``: the first A-D character of the upper-cased
    reply (``"THE ANSWER"`` -> A); without one, its first word (not a valid letter: dropped)."""
    text = reply.strip().upper()
    first = next((ch for ch in text if ch in LETTERS), None)
    if first:
        return first
    words = text.split()
    return words[0] if words else ""


def letter_tau(reply: str, choices: Sequence[str]) -> str:
    """ASC, ``TAU_qwen2.5.py: extract_acoustic_scene_answer``: ``scene_letter`` of the reply after the
    ``assistant`` cut."""
    return scene_letter(after_assistant(reply), choices)


def scene_letter(reply: str, choices: Sequence[str]) -> str:
    """``extract_acoustic_scene_answer`` (every model's TAU script has the same function): lower-cased;
    the reply is a letter; starts ``x.``, ``x)`` or ``x:`` (a before b...); contains ``option x``,
    ``choice x`` or ``x)``; contains a whole option text (first option in order, an empty option always
    matches); else the option sharing the most of its words (substring test, text before ``" - "``)
    with the reply, if more than one and strictly the most so far."""
    text = reply.strip().lower()
    if text in ("a", "b", "c", "d"):
        return text.upper()
    for letter in LETTERS:
        x = letter.lower()
        if text.startswith((f"{x}.", f"{x})", f"{x}:")):
            return letter
    for letter in LETTERS:
        x = letter.lower()
        if f"option {x}" in text or f"choice {x}" in text or f"{x})" in text:
            return letter
    best, most = "", 0
    for i, choice in enumerate(choices):
        choice = choice.lower()
        if choice in text:
            return chr(65 + i)
        overlap = sum(1 for word in choice.split(" - ")[0].split() if word in text)
        if overlap > most:
            best, most = chr(65 + i), overlap
    return best if best and most > 1 else ""


EMOTION_SYNONYMS = {
    "angry": ("anger", "frustrated", "mad", "furious"),
    "happy": ("joy", "cheerful", "pleased", "delighted"),
    "sad": ("sadness", "melancholy", "depressed", "sorrow"),
    "fearful": ("fear", "anxiety", "scared", "afraid"),
    "monotone": ("flat", "emotionless", "neutral", "bland"),
}


def letter_vesus(reply: str, choices: Mapping[str, str]) -> str:
    """ER, ``VESUS_qwen2.5.py: extract_emotion_answer``: lower-cased; the reply is ``x`` or starts
    ``x.``/``x)``; contains ``option x``, ``choice x``, ``x)`` or ``(x)``; else the first option
    (``choices`` keyed ``choice_a``...) that shares a synonym group with the reply, both by substring.
    The groups list synonyms, not the emotion names, so an option reading "Angry" never matches."""
    text = after_assistant(reply).strip().lower()
    if letter := emotion_letter_forms(text):
        return letter
    for letter in LETTERS:
        key = f"choice_{letter.lower()}"
        if key in choices:
            option = choices[key].lower()
            for words in EMOTION_SYNONYMS.values():
                if any(w in text for w in words) and any(w in option for w in words):
                    return letter
    return ""


def emotion_letter_forms(text: str) -> str:
    """The letter steps every model's ``extract_emotion_answer`` starts with, on the lower-cased reply:
    the reply is ``x`` or starts ``x.``/``x)``; else it contains ``option x``, ``choice x``, ``x)`` or
    ``(x)`` (a before b...); ``""`` when neither."""
    for letter in LETTERS:
        x = letter.lower()
        if text == x or text.startswith((f"{x}.", f"{x})")):
            return letter
    for letter in LETTERS:
        x = letter.lower()
        if any(p in text for p in (f"option {x}", f"choice {x}", f"{x})", f"({x})")):
            return letter
    return ""


def label_had(reply: str, generated_tokens: int = 0) -> str:
    """SD, ``HAD_qwen2.5.py``: ``real``, ``fake`` or ``""``. With more than 10 generated tokens the
    first whitespace-separated word among real/fake/authentic/synthesized replaces the reply
    (never, with their 5-token limit). Then ``extract_authenticity_answer``: ``a``/``b`` forms (the
    reply is the letter, starts ``x.``/``x)``, ends ``" x"``; contains ``option x``, ``choice x``,
    ``x)`` or ``" x "``), then "real" xor "fake" as substrings, then word-level synonyms."""
    text = after_assistant(reply).strip()
    if generated_tokens > 10:
        word = next((w for w in text.lower().split() if w in ("real", "fake", "authentic", "synthesized")), None)
        if word:
            text = {"authentic": "real", "synthesized": "fake"}.get(word, word)
    text = text.lower().strip()
    for x, label in (("a", "real"), ("b", "fake")):
        if text == x or text.startswith((f"{x}.", f"{x})")) or text.endswith(f" {x}"):
            return label
    for x, label in (("a", "real"), ("b", "fake")):
        if f"option {x}" in text or f"choice {x}" in text or f"{x})" in text or f" {x} " in text:
            return label
    if ("real" in text) != ("fake" in text):
        return "real" if "real" in text else "fake"
    real = re.search(r"\breal\b|\bauthentic\b|\bgenuine\b|\bcompletely authentic\b", text) is not None
    fake = re.search(r"\bfake\b|\bartificial\b|\bsynthetic\b|\bsynthesized\b|\bcontains.*fake\b", text) is not None
    return "real" if real and not fake else "fake" if fake and not real else ""


def label_gender(reply: str, choice_a: str = "male", choice_b: str = "female") -> str:
    """SGR, ``Vox_qwen2.5.py: extract_gender_answer`` (Phi-4's and Aero-1's VoxCeleb gender scripts have
    the same): ``two_way_label`` with, for male/female, ``\\bmale\\b`` xor ``\\bfemale\\b`` last
    ("female" contains "male", so a reply naming female falls through the substring step)."""
    gendered = (choice_a.lower().strip(), choice_b.lower().strip()) == ("male", "female")
    return two_way_label(reply, choice_a, choice_b, (r"\bmale\b", r"\bfemale\b") if gendered else None)


def two_way_label(reply: str, choice_a: str, choice_b: str, words: tuple[str, str] | None) -> str:
    """The lower-cased option text or ``""``, as the scripts' two-option extractors find it: ``a``/``b``
    forms (the reply is the letter or starts ``x.``/``x)``; contains ``option x``, ``choice x`` or
    ``x)``), then one option text but not the other as substrings, then (``words``: a pattern per
    option) one option's pattern but not the other's."""
    text = reply.lower().strip()
    a, b = choice_a.lower().strip(), choice_b.lower().strip()
    for x, label in (("a", a), ("b", b)):
        if text == x or text.startswith((f"{x}.", f"{x})")):
            return label
    for x, label in (("a", a), ("b", b)):
        if f"option {x}" in text or f"choice {x}" in text or f"{x})" in text:
            return label
    if (a in text) != (b in text):
        return a if a in text else b
    if words is not None:
        first, second = (re.search(pattern, text) is not None for pattern in words)
        if first != second:
            return a if first else b
    return ""


def label_age(reply: str, choices: Mapping[str, str]) -> str:
    """SAR, ``Vox_age_qwen2.5.py: extract_age_answer``: the chosen option's text (``choices`` keyed
    ``choice_a``..``choice_e``) or ``""``: letter forms (the reply is ``x``, starts ``x.``/``x)``,
    ends ``" x"``, a before b...); then exactly one of the letters a-e as a standalone word; then
    ``option x``, ``choice x`` or ``answer x``; then exactly one option text as a substring."""
    text = reply.lower().strip()
    for x in "abcde":
        if text == x or text.startswith((f"{x}.", f"{x})")) or text.endswith(f" {x}"):
            return choices[f"choice_{x}"]
    standalone = [x for x in "abcde" if re.search(rf"\b{x}\b", text)]
    if len(standalone) == 1:
        return choices[f"choice_{standalone[0]}"]
    for key, option in choices.items():
        x = key[-1].lower()
        if f"option {x}" in text or f"choice {x}" in text or f"answer {x}" in text:
            return option
    return one_option_named(text, choices.values())


def one_option_named(text: str, options) -> str:
    """The one option whose lower-cased text the (lower-cased) reply contains, else ``""``."""
    named = [option for option in options if option.lower() in text]
    return named[0] if len(named) == 1 else ""


_MARKERS = ("spoken content:", "content:", "transcription:", "transcript:")


def transcript(reply: str) -> str:
    """ASR, ``LibriSpeech_qwen2.5.py: clean_response``: ``clean_transcript`` of the reply after the
    ``assistant`` cut."""
    return clean_transcript(after_assistant(reply))


def clean_transcript(text: str) -> str:
    """``clean_response`` (Aero-1's and Voxtral's LibriSpeech scripts have the same one): the text
    between the first transcript marker (``spoken content:``, else ``content:``...) and its next
    occurrence, without the ``<transcribed text here>`` placeholder, ``<sep>`` tails or a leading label."""
    if not text.strip():
        return ""
    for marker in _MARKERS:
        if marker in text.lower():
            parts = re.split(re.escape(marker), text, flags=re.IGNORECASE)
            if len(parts) > 1:
                text = parts[1].strip()
                break
    text = re.sub(r"<transcribed text here>", "", text)
    text = re.sub(r"<sep>.*?($|<|$)", "", text)
    text = re.sub(r"(?i)^(spoken\s+(?:text|content)|content|transcript|transcription):\s*", "", text.strip())
    return text.strip()


EXTRACTORS: dict[str, Callable[..., str]] = {
    "SED": letter_desed, "MC": letter_gtzan, "SCR": letter_race, "SER": letter_slue, "ASC": letter_tau,
    "ER": letter_vesus, "SD": label_had, "SAR": label_age, "SGR": label_gender, "ASR": transcript,
}
