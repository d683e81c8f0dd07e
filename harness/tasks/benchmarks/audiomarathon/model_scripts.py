"""AudioMarathon's scripts for the models other than Qwen2.5-Omni (DabDans/AudioMarathon, commit
c8f49f3): their answer extractors and how each script scores, keyed ``"<task>:<kvprune family>"``.

- Phi-4-multimodal: ``src/Phi4MM/Others/{DESED,HAD,SLUE,TAU,VESUS,Vox_age,Vox}_test.py``,
  ``gtzan_test.py``, ``race_test.py`` (no LibriSpeech script).
- Aero-1-Audio: ``src/Aero-1/Others/*_test_aero.py`` and ``desed_aero1_test_sing_event.py``.
- Voxtral: ``src/Voxtral/eval_*.py`` (``eval_Vox.py`` is a copy of the DESED script: it reads
  DESED's task file, so Voxtral has no VoxCeleb gender script).

These scripts decode the reply alone (never the prompt with it), so no extractor here cuts at
``"assistant\\n"`` as the Qwen ones do. Extractors the scripts share with the Qwen ones are
``audiomarathon``'s: ``choice_letter`` (``extract_answer_choice``), ``letter_race``
(``clean_text_response``), ``scene_letter`` (``extract_acoustic_scene_answer``), ``label_gender``
(``extract_gender_answer``) and ``clean_transcript`` (``clean_response``/``clean_asr_response``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .rules import EMOTION_SYNONYMS, LETTERS, emotion_letter_forms, one_option_named, two_way_label
from .scores import NONEMPTY, Task, lower_stripped

PHI4, AERO, VOXTRAL = "phi4_multimodal", "aero", "voxtral"
AGE_GROUPS = ("Young Adult (18-30)", "Early Career (31-40)", "Mid Career (41-50)", "Senior (51-70)", "Elderly (71+)")


def emotion_choice(reply: str, choices: Mapping[str, str]) -> str:
    """ER, ``extract_emotion_answer`` of Phi-4's ``VESUS_test.py`` and Aero-1's ``VESUS_test_aero.py``:
    lower-cased; the reply is ``x`` or starts ``x.``/``x)``; contains ``option x``, ``choice x``, ``x)``
    or ``(x)``; else the first option (``choices`` keyed ``choice_a``...) naming an emotion or one of
    its synonyms that the reply names too (by substring). Unlike the Qwen script's, the emotion's own
    name counts ("Angry" matches "angry"); "sad" also matches inside "sadness"."""
    text = reply.lower().strip()
    if letter := emotion_letter_forms(text):
        return letter
    for letter in LETTERS:
        option = choices.get(f"choice_{letter.lower()}")
        if option is None:
            continue
        for emotion, words in EMOTION_SYNONYMS.items():
            in_option = emotion in option.lower() or any(w in option.lower() for w in words)
            if in_option and (any(w in text for w in words) or emotion in text):
                return letter
    return ""


def authenticity_phi4(reply: str) -> str:
    """SD, Phi-4's ``HAD_test.py: extract_authenticity_answer`` (called with real, fake): ``a``/``b``
    forms, then "real" xor "fake" as substrings, then ``\\breal\\b|\\bauthentic\\b|\\bgenuine\\b`` xor
    ``\\bfake\\b|\\bartificial\\b|\\bsynthetic\\b|\\bsynthesized\\b``. Unlike the Qwen script's, no
    ``" a"`` ending and no ``" a "`` anywhere count as letters."""
    words = (r"\breal\b|\bauthentic\b|\bgenuine\b", r"\bfake\b|\bartificial\b|\bsynthetic\b|\bsynthesized\b")
    return two_way_label(reply, "real", "fake", words)


def authenticity_aero(reply: str) -> str:
    """SD, Aero-1's ``HAD_test_aero.py: extract_authenticity_answer``: "real" xor "fake" as substrings;
    then authentic/genuine/natural without fake/artificial/synthetic -> real; then
    artificial/synthetic/generated without real/authentic/genuine -> fake. No letters: its prompt
    asks for the word."""
    text = reply.lower().strip()

    def names(*words: str) -> bool:
        return any(w in text for w in words)

    if ("real" in text) != ("fake" in text):
        return "real" if "real" in text else "fake"
    if names("authentic", "genuine", "natural") and not names("fake", "artificial", "synthetic"):
        return "real"
    if names("artificial", "synthetic", "generated") and not names("real", "authentic", "genuine"):
        return "fake"
    return ""


def age_choice(reply: str, choices: Mapping[str, str]) -> str:
    """SAR, ``extract_age_answer`` of Phi-4's ``Vox_age_test.py`` (options a-e) and Aero-1's
    ``Vox_age_test_aero.py`` (options a-d: its ``choice_e`` is commented out, so an "e" reply or the
    fifth group's text is never read): the option's text for a reply that is ``x`` or starts
    ``x.``/``x)``; then ``option x``, ``choice x`` or ``x)`` anywhere (options in order); then the one
    option whose text the reply contains; else ``""``."""
    text = reply.lower().strip()
    for key, option in choices.items():
        x = key[-1].lower()
        if text == x or text.startswith((f"{x}.", f"{x})")):
            return option
    for key, option in choices.items():
        x = key[-1].lower()
        if f"option {x}" in text or f"choice {x}" in text or f"{x})" in text:
            return option
    return one_option_named(text, choices.values())


def genre_voxtral(reply: str, choices: Sequence[str]) -> str:
    """MC, Voxtral's ``eval_GTZAN.py: extract_genre_answer``: lower-cased; ``the answer is x``;
    ``answer: x``; the reply is ``x`` or starts ``x.``/``x)``; ``option x``, ``choice x`` or ``x)``
    anywhere; an option's text in the reply (options in order); the option's text before ``" - "``."""
    if not reply:
        return ""
    text = reply.lower().strip()
    for pattern in (r"the answer is ([abcd])", r"answer:\s*([abcd])"):
        match = re.search(pattern, text)
        if match:
            return match[1].upper()
    genres = dict(zip("abcd", choices))
    for x in genres:
        if text == x or text.startswith((f"{x}.", f"{x})")):
            return x.upper()
    for x in genres:
        if f"option {x}" in text or f"choice {x}" in text or f"{x})" in text:
            return x.upper()
    for x, genre in genres.items():
        if genre.lower() in text:
            return x.upper()
    for x, genre in genres.items():
        if genre.split(" - ")[0].lower() in text:
            return x.upper()
    return ""


def race_voxtral(reply: str) -> str:
    """SCR, Voxtral's ``eval_RACE.py: extract_race_answer``: the first A-D character of the upper-cased
    reply, else ``""``. Its later rules (``ANSWER IS x``, ``x CORRECT``, single-letter words...) all need
    an A-D character, so they can never fire after the first one failed."""
    return next((ch for ch in reply.strip().upper() if ch in LETTERS), "")


def authenticity_voxtral(reply: str) -> str:
    """SD, Voxtral's ``eval_HAD.py: extract_answer_choice``, its ``a``/``b`` read as the folders they
    stand for (a = real, b = fake, as its loader labels them): lower-cased; the reply is the letter; a
    standalone a/b; ANY a or b character (so "the audio is fake" is "a", from "audio"); then "real" xor
    "fake", which that rule leaves nothing to decide."""
    return {"a": "real", "b": "fake"}.get(_ab_letter(reply.strip().lower()), "")


def _ab_letter(text: str) -> str:
    if text in ("a", "b"):
        return text
    for pattern in (r"\b([ab])\b", r"[(\[]?([ab])[)\].]?"):
        match = re.search(pattern, text)
        if match:
            return match[1]
    if ("real" in text) != ("fake" in text):
        return "a" if "real" in text else "b"
    return ""


def age_voxtral(reply: str, choices: Mapping[str, str]) -> str:
    """SAR, Voxtral's ``eval_Vox_Age.py: extract_answer_choice``: the option's text (``choices`` keyed
    ``choice_a``..``choice_e``) for a reply that is ``x`` or starts ``x.``/``x)``; then the first
    standalone a-e; then ANY a-e character (nearly every reply has one: "the" gives e)."""
    text = reply.strip().lower()
    for x in "abcde":
        if text == x or text.startswith((f"{x}.", f"{x})")):
            return choices.get(f"choice_{x}", "")
    for pattern in (r"\b([abcde])\b", r"[(\[]?([abcde])[)\].]?"):
        match = re.search(pattern, text)
        if match:
            return choices.get(f"choice_{match[1]}", "")
    return ""


def _stripped_upper(label: str) -> str:
    return label.strip().upper()


RULES: dict[str, Task] = {
    # Phi-4: DESED and SLUE keep every non-empty pair (gold and answer stripped, upper-cased) and headline
    # F1 macro; VESUS headlines F1 weighted; GTZAN, RACE, TAU and VoxCeleb age print accuracy over all
    # samples alone (the Qwen rules' SCR, MC, ASC, SAR then give the F1s beside it); HAD and VoxCeleb
    # gender score as the Qwen scripts do (SD, SGR).
    f"SED:{PHI4}": Task("src/Phi4MM/Others/DESED_test.py", NONEMPTY, False, "f1_macro", _stripped_upper),
    f"SER:{PHI4}": Task("src/Phi4MM/Others/SLUE_test.py", NONEMPTY, False, "f1_macro", _stripped_upper),
    f"ER:{PHI4}": Task("src/Phi4MM/Others/VESUS_test.py", None, False, "f1_weighted", _stripped_upper),
    # Aero-1: accuracy over all samples everywhere, but HAD's binary F1 (fake positive, as SD) and
    # VoxCeleb gender's (female positive).
    f"SED:{AERO}": Task("src/Aero-1/Others/desed_aero1_test_sing_event.py", LETTERS, False, "correct_rate",
                        _stripped_upper),
    f"SER:{AERO}": Task("src/Aero-1/Others/SLUE_test_aero.py", LETTERS, False, "correct_rate", str.upper),
    f"SGR:{AERO}": Task("src/Aero-1/Others/Vox_test_aero.py", ("male", "female"), False, "f1_positive",
                        lower_stripped, positive="female"),
    # Voxtral: F1 over the pairs whose labels are both valid, averaged over the labels present; DESED and
    # SLUE score as the Qwen scripts do (SED, SER).
    f"MC:{VOXTRAL}": Task("src/Voxtral/eval_GTZAN.py", LETTERS, False, "f1_macro", str.strip),
    f"SCR:{VOXTRAL}": Task("src/Voxtral/eval_RACE.py", LETTERS, False, "f1_weighted"),
    f"ASC:{VOXTRAL}": Task("src/Voxtral/eval_TAU.py", LETTERS, False, "f1_weighted"),
    f"ER:{VOXTRAL}": Task("src/Voxtral/eval_VESUS.py", LETTERS, False, "f1_weighted", str.strip),
    f"SD:{VOXTRAL}": Task("src/Voxtral/eval_HAD.py", ("real", "fake"), False, "f1_weighted", lower_stripped),
    f"SAR:{VOXTRAL}": Task("src/Voxtral/eval_Vox_Age.py", AGE_GROUPS, False, "f1_weighted", str.strip),
}
