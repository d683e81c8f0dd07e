"""MMAU and MMAR, reproduced from Sakshi113/MMAU ``evaluation.py`` and ddlBoJack/MMAR
``code/evaluation.py`` (MMAR's ``string_match`` is MMAU's, unchanged).

Items: MMAU test-mini is a JSON list (``id, audio_id, question, choices, answer, dataset, task,
split, category, sub-category, difficulty``; ``category`` is a list in 13 items); MMAR is JSON lines
(``id, audio_path, question, choices, answer, modality, category, sub-category, language, ...``).
``answer`` is the gold option's text. The official scripts read the model's reply from the key
``model_output`` (MMAU) or ``answer_prediction`` (MMAR), skip items without that key, and score the
whole reply with ``string_match`` against the gold text: no letter parsing at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ....scoring.records import read_records

# The breakdowns the official scripts print, with their fixed row lists (a value outside a list
# makes the official script crash with a KeyError); sub-categories are listed as first seen.
MMAU_TABLES: dict[str, tuple[str, ...]] = {
    "task": ("sound", "music", "speech"), "difficulty": ("easy", "hard", "medium"),
}
MMAR_TABLES: dict[str, tuple[str, ...]] = {
    "modality": ("sound", "music", "speech", "mix-sound-music", "mix-sound-speech", "mix-music-speech",
                 "mix-sound-music-speech"),
    "category": ("Signal Layer", "Perception Layer", "Semantic Layer", "Cultural Layer"),
}
SUBCATEGORY = "sub-category"
PREDICTION_KEYS = {"mmau": "model_output", "mmar": "answer_prediction"}


def tokenize(text: str) -> set[str]:
    """The set of lower-cased word tokens (``\\b\\w+\\b``): punctuation and order do not count."""
    return set(re.findall(r"\b\w+\b", text.lower()))


def string_match(answer: str, prediction: str, choices: Sequence[str]) -> bool:
    """``string_match``: right iff the prediction has a token, holds every token of the gold text,
    and none of the "incorrect tokens": the tokens of each option whose token set differs from the
    gold's, minus the gold's own tokens.

    Consequences: an option with the gold's token set (a repeated option, or the same words in
    another order, "Mono first, stereo later" / "Stereo first, mono later") is accepted as right;
    an empty option adds no incorrect token; letters are ignored unless an option contains them.
    """
    predicted, gold = tokenize(prediction), tokenize(answer)
    if not predicted:
        return False
    incorrect: set[str] = set()
    for choice in choices:
        tokens = tokenize(choice)
        if tokens != gold:
            incorrect |= tokens - gold
    return gold <= predicted and predicted.isdisjoint(incorrect)


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def answer_span(output: str) -> str:
    """The text of the last ``<answer>...</answer>`` in a reply, else the whole reply.

    Not in the official scripts: MMAR's script expects the final answer alone under
    ``answer_prediction`` (its rubric script takes the reasoning separately, as
    ``thinking_prediction``); this is how a reasoning model's reply is split into the two."""
    match = last_answer_tag(output)
    return match.group(1) if match else output


def last_answer_tag(output: str) -> re.Match | None:
    """The last ``<answer>...</answer>`` of a reply (any case), or None."""
    matches = list(_ANSWER_TAG.finditer(output))
    return matches[-1] if matches else None


@dataclass(frozen=True)
class Item:
    """One question. ``answer`` is the gold text; it may equal several options (MMAU repeats options
    in 27 items) and options may be empty strings (4 MMAR items)."""

    id: str
    audio: str  # the path as the file gives it (MMAU ``audio_id``, MMAR ``audio_path``)
    question: str
    choices: tuple[str, ...]
    answer: str
    fields: dict = field(default_factory=dict, compare=False)  # every field of the record

    @property
    def gold_letters(self) -> str:
        """Letters (A, B, ...) of every option equal to the gold text."""
        return "".join(chr(ord("A") + i) for i, c in enumerate(self.choices) if c == self.answer)


def read_items(path: Path | str) -> list[Item]:
    """Items of a ``.json`` list or ``.jsonl`` file (optionally ``.gz``), in file order.

    Raises ValueError naming the record when a field is missing or mistyped, or when the gold text
    is not one of the options (``string_match`` would still score it, but the item is broken)."""
    path = Path(path)
    records = read_records(path)
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of items")
    return [_item(record, f"{path.name} item {i}") for i, record in enumerate(records)]


def _item(record: Mapping, where: str) -> Item:
    if not isinstance(record, dict):
        raise ValueError(f"{where} is not a JSON object")
    audio_key = "audio_id" if "audio_id" in record else "audio_path"
    for key in ("id", audio_key, "question", "choices", "answer"):
        if key not in record:
            raise ValueError(f"{where} has no field {key!r}")
    choices = record["choices"]
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise ValueError(f"{where}: choices must be a list of strings, got {choices!r}")
    if not isinstance(record["answer"], str) or record["answer"] not in choices:
        raise ValueError(f"{where}: answer {record['answer']!r} is not one of the choices {choices}")
    return Item(str(record["id"]), str(record[audio_key]), str(record["question"]), tuple(choices),
                record["answer"], dict(record))


def accuracy_report(
    items: Sequence[Item], predictions: Mapping[str, str], tables: Mapping[str, tuple[str, ...]]
) -> dict:
    """The official script's printout as numbers: ``{"total": (correct, n, %), <field>: {value: (correct,
    n, %)}, "sub-category": {...}}``. Items without a prediction are skipped (as the scripts skip
    records without the prediction key); a table row with no item shows 0 %. ``tables`` is
    ``MMAU_TABLES`` or ``MMAR_TABLES``; items without a sub-category stay out of that table."""
    rows = {key: {value: [0, 0] for value in values} for key, values in tables.items()}
    by_subcategory: dict[str, list[int]] = {}
    correct = total = 0
    for item in items:
        if item.id not in predictions:
            continue
        right = string_match(item.answer, predictions[item.id], item.choices)
        cells = []
        for key in tables:
            value = item.fields.get(key)
            if value not in rows[key]:
                raise ValueError(f"item {item.id}: {key} {value!r} is not one of {list(rows[key])}")
            cells.append(rows[key][value])
        if item.fields.get(SUBCATEGORY) is not None:
            cells.append(by_subcategory.setdefault(item.fields[SUBCATEGORY], [0, 0]))
        for cell in cells:
            cell[0] += right
            cell[1] += 1
        correct += right
        total += 1
    if not total:
        raise ValueError("no item has a prediction")
    report: dict = {"total": _row(correct, total)}
    for key, table in rows.items():
        report[key] = {value: _row(*cell) for value, cell in table.items()}
    report[SUBCATEGORY] = {value: _row(*cell) for value, cell in by_subcategory.items()}
    return report


def _row(correct: int, total: int) -> tuple[int, int, float]:
    return correct, total, (correct / total) * 100 if total > 0 else 0.0
