"""AudioMarathon's per-task extraction (the ``audiomarathon`` protocol): ``audiomarathon_<task>``, its
Qwen2.5-Omni scripts' extractors, and ``audiomarathon_<family>_<task>``, its scripts for Phi-4-MM,
Aero-1 and Voxtral: a letter, ``real``/``fake``, an option's text, a transcript; ``""`` when they find
nothing.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence

from ...parsers import Parser, register_parser
from . import model_scripts, rules


def _choice_fields(choices: Sequence[str]) -> dict[str, str]:
    """Options keyed as AudioMarathon's items key them: ``choice_a``, ``choice_b``..."""
    return {f"choice_{letter.lower()}": text for letter, text in zip(string.ascii_uppercase, choices)}


_AUDIOMARATHON = {
    "sed": lambda output, choices: rules.letter_desed(output),
    "mc": lambda output, choices: rules.letter_gtzan(output),
    "scr": lambda output, choices: rules.letter_race(output),
    "ser": lambda output, choices: rules.letter_slue(output),
    "asc": lambda output, choices: rules.letter_tau(output, choices),
    "er": lambda output, choices: rules.letter_vesus(output, _choice_fields(choices)),
    "sd": lambda output, choices: rules.label_had(output),
    "sar": lambda output, choices: rules.label_age(output, _choice_fields(choices)),
    "sgr": lambda output, choices: rules.label_gender(output, *choices[:2]),
    "asr": lambda output, choices: rules.transcript(output),
}
for _task, _extract in _AUDIOMARATHON.items():
    register_parser(f"audiomarathon_{_task}")(_extract)


# The other models' scripts (``model_scripts``), by the kvprune family they ran.


def _reply(extract: Callable[[str], str]) -> Parser:
    return lambda output, choices: extract(output)


def _keyed(extract: Callable[[str, dict], str], count: int | None = None) -> Parser:
    """An extractor reading options keyed ``choice_a``... (the first ``count`` of them)."""
    return lambda output, choices: extract(output, _choice_fields(choices[:count]))


_LETTER, _FIRST_LETTER = _reply(rules.choice_letter), _reply(rules.letter_race)
_GENDER, _TRANSCRIPT = _reply(rules.label_gender), _reply(rules.clean_transcript)
_EMOTION = _keyed(model_scripts.emotion_choice)
_AUDIOMARATHON_MODELS = {
    "phi4_multimodal": {  # src/Phi4MM/Others/*_test.py
        "sed": _LETTER, "ser": _LETTER, "mc": _FIRST_LETTER, "scr": _FIRST_LETTER, "asc": rules.scene_letter,
        "er": _EMOTION, "sd": _reply(model_scripts.authenticity_phi4),
        "sar": _keyed(model_scripts.age_choice), "sgr": _GENDER,
    },
    "aero": {  # src/Aero-1/Others/*_test_aero.py, desed_aero1_test_sing_event.py
        "sed": _LETTER, "ser": _LETTER, "mc": _FIRST_LETTER, "scr": _FIRST_LETTER, "asc": rules.scene_letter,
        "er": _EMOTION, "sd": _reply(model_scripts.authenticity_aero),
        "sar": _keyed(model_scripts.age_choice, 4),  # its choice_e is commented out
        "sgr": _GENDER, "asr": _TRANSCRIPT,
    },
    "voxtral": {  # src/Voxtral/eval_*.py
        "sed": _LETTER, "ser": _LETTER, "er": _LETTER, "mc": model_scripts.genre_voxtral,
        "scr": _reply(model_scripts.race_voxtral), "asc": rules.scene_letter,
        "sd": _reply(model_scripts.authenticity_voxtral), "sar": _keyed(model_scripts.age_voxtral),
        "asr": _TRANSCRIPT,
    },
}
for _family, _extractors in _AUDIOMARATHON_MODELS.items():
    for _task, _extract in _extractors.items():
        register_parser(f"audiomarathon_{_family}_{_task}")(_extract)
