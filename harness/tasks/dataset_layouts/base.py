"""What every dataset layout is (``Layout``), the registry they are named from (``LAYOUTS``), and the
pieces several layouts share: reading a metadata file's items, an item's fields, the gold answer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from kvprune.registry import Registry

from ...scoring.records import read_records
from ..prompts import LETTERS
from ..sample import Sample, TaskDataError


class Layout(Protocol):
    def load(self, task_dir: Path) -> list[Sample]: ...

    def describe(self, task_dir: str) -> str: ...

    def metadata_fields(self) -> set[str] | None: ...

    def audio_names(self) -> tuple[str, ...]: ...


LAYOUTS: Registry[type[Layout]] = Registry("dataset layout")

GOLD_FORMS = {
    "letter_or_text": "a letter, or exactly one option's text (any case): the sample's answer is its letter",
    "first_option": "an option's exact text: the letter of the first option equal to it (STAR-Bench)",
    "text": "an option's exact text, which may equal several options: the answer stays that text (MMAU, MMAR)",
    "raw": "kept exactly as the file gives it (a benchmark's own scorer reads it)",
}


def gold_letter(answer: Any, choices: Sequence[str], where: str) -> str:
    """The letter of the gold answer, given as a letter (``"b"``) or as an option's text (``"Male"``,
    matched case-insensitively): AudioMarathon's files use both."""
    text = str(answer).strip()
    named = [i for i, choice in enumerate(choices) if choice.strip().lower() == text.lower()]
    if len(named) == 1:
        return LETTERS[named[0]]
    letters = LETTERS[: len(choices)]
    if not named and len(text) == 1 and text.upper() in letters:
        return text.upper()
    raise TaskDataError(
        f"{where}: answer {answer!r} is neither a letter {letters[0]}-{letters[-1]} "
        f"nor exactly one of the choices {list(choices)}."
    )


def gold_answer(answer: Any, choices: Sequence[str], form: str, where: str) -> str:
    """The sample's answer from an item's gold field, in the ``GOLD_FORMS`` form."""
    if form == "letter_or_text":
        return gold_letter(answer, choices, where)
    if form == "raw":
        return str(answer)
    if not isinstance(answer, str) or answer not in choices:
        raise TaskDataError(f"{where}: answer {answer!r} is not exactly one of the choices {list(choices)}; fix the item.")
    return LETTERS[list(choices).index(answer)] if form == "first_option" else answer


def read_items(path: Path, items_key: str | None = None) -> list:
    """The list of items of a metadata file (``read_records``), or TaskDataError saying what is wrong."""
    if not path.is_file():
        raise TaskDataError(f"{path} not found.")
    try:
        data = read_records(path)
    except (ValueError, UnicodeDecodeError) as error:
        raise TaskDataError(f"{error}.") from None
    items = (data.get(items_key) if isinstance(data, dict) else None) if items_key else data
    if not isinstance(items, list):
        container = f'an object with a list under "{items_key}"' if items_key else "a JSON list"
        raise TaskDataError(f"{path} is not {container}.")
    return items


def item_field(item: dict, name: str, where: str) -> Any:
    if name not in item:
        raise TaskDataError(f"{where} has no field {name!r}; add it to the item or set the layout's field name.")
    return item[name]


def item_path(item: dict, name: str, where: str) -> str:
    value = item_field(item, name, where)
    if not isinstance(value, str):
        raise TaskDataError(f"{where}: field {name!r} must be an audio path.")
    return value
