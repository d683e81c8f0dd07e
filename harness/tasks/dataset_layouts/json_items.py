"""The ``json_items`` layout: a JSON list or JSON lines of question items, one Sample each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..prompts import LETTERS
from ..sample import Sample, TaskDataError
from .base import GOLD_FORMS, LAYOUTS, gold_answer, item_field, item_path, read_items


@LAYOUTS.register("json_items")
@dataclass(frozen=True)
class JsonItems:
    """A JSON list (``.json``) or JSON lines (``.jsonl``) of question items, one Sample each (the
    AudioMarathon tasks, STAR-Bench, MMAU, MMAR, ST-AudioQA).

    ``audio_root`` is the folder (or folders, tried in order) the items' audio paths are relative to;
    an item's audio field may hold one path or a list (several clips in prompt order); ``named_audio``
    maps a name a prompt segment uses to another audio field (``{uncut: uncut_audio_path}``). Choices
    come from several fields (``choice_fields``) or one field holding a list or an object keyed A, B,
    ... (``choices_field``). ``gold`` says how the answer field is read (``GOLD_FORMS``). ``exclude``
    drops items whose fields all equal one rule's values. ``meta_fields`` are kept with each sample
    and written into each result row. Sample ids are the ``id_field`` value, or the first audio path
    (``#2``, ``#3``... on repeats). ``metadata`` is the file's name, or several names tried in order
    (a benchmark that released its metadata under two names: MMAR's ``.json``, then ``.jsonl``).
    """

    metadata: str | Sequence[str]
    items_key: str | None = None
    audio_root: str | Sequence[str] = "."
    audio_field: str = "path"
    question_field: str = "question"
    choice_fields: Sequence[str] = ("choice_a", "choice_b", "choice_c", "choice_d")
    choices_field: str | None = None
    answer_field: str = "answer_gt"
    gold: str = "letter_or_text"
    id_field: str | None = None
    meta_fields: Sequence[str] = ()
    named_audio: Mapping[str, str] = field(default_factory=dict)
    exclude: Sequence[dict] = ()

    def __post_init__(self):
        names = [self.metadata] if isinstance(self.metadata, str) else self.metadata
        if not names or not all(isinstance(name, str) and name for name in names):
            raise ValueError("metadata must be the metadata file's name, or a list of names tried in order")
        if isinstance(self.exclude, (str, dict)) or not all(isinstance(rule, dict) for rule in self.exclude):
            raise ValueError("exclude must be a list of {field: value} rules")
        if self.gold not in GOLD_FORMS:
            raise ValueError(f"gold={self.gold!r}; choose one of {', '.join(GOLD_FORMS)}")
        if isinstance(self.meta_fields, str) or not all(isinstance(f, str) for f in self.meta_fields):
            raise ValueError("meta_fields must be a list of field names")
        if not isinstance(self.named_audio, Mapping) or not all(isinstance(v, str) for v in self.named_audio.values()):
            raise ValueError("named_audio must map names to audio fields, {name: field}")

    def describe(self, task_dir: str) -> str:
        container = f'an object {{"{self.items_key}": [items]}}' if self.items_key else " or ".join(
            "JSON lines, one item each" if ".jsonl" in name else "a JSON list of items" for name in self._names())
        fields = [self.audio_field, *self.named_audio.values(), self.question_field, self._choices_description(),
                  f"{self.answer_field} ({GOLD_FORMS[self.gold]})"]
        roots = " or ".join(f"{task_dir}/{root}".removesuffix("/.") for root in self._roots())
        return (
            f"{' or '.join(f'{task_dir}/{name}' for name in self._names())} holding {container} with fields {{{', '.join(fields)}}}; "
            f"audio paths relative to {roots}"
        )

    def metadata_fields(self) -> set[str]:
        return set(self.meta_fields)

    def audio_names(self) -> tuple[str, ...]:
        return tuple(self.named_audio)

    def _names(self) -> list[str]:
        return [self.metadata] if isinstance(self.metadata, str) else list(self.metadata)

    def load(self, task_dir: Path) -> list[Sample]:
        path = next((task_dir / name for name in self._names() if (task_dir / name).is_file()), task_dir / self._names()[0])
        samples, uses_of_clip = [], Counter()
        for index, item in enumerate(read_items(path, self.items_key)):
            where = f"{path.name} item {index}"
            if isinstance(item, dict) and self._excluded(item):
                continue
            try:
                sample = self._sample(task_dir, item, where, uses_of_clip)
            except TaskDataError as error:
                sample = Sample.broken(self._id_of(item, index), str(error))
            samples.append(sample)
        repeated = [i for i, n in Counter(s.id for s in samples).items() if n > 1]
        if repeated:
            raise TaskDataError(f"{path}: sample ids repeat ({', '.join(repeated[:3])}); set a unique id_field.")
        return samples

    def _sample(self, task_dir: Path, item: Any, where: str, uses_of_clip: Counter) -> Sample:
        if not isinstance(item, dict):
            raise TaskDataError(f"{where} is not a JSON object; fix the item.")
        clips = self._clips(item, where)
        if self.id_field:
            sample_id = str(item_field(item, self.id_field, where))
        else:
            uses_of_clip[clips[0]] += 1
            sample_id = clips[0] if uses_of_clip[clips[0]] == 1 else f"{clips[0]}#{uses_of_clip[clips[0]]}"
        where = f"{where} (sample {sample_id})"
        choices = self._choices(item, where)
        return Sample(
            id=sample_id,
            audio=tuple(self._find_audio(task_dir, clip, where) for clip in clips),
            question=str(item_field(item, self.question_field, where)),
            choices=choices,
            answer=gold_answer(item_field(item, self.answer_field, where), choices, self.gold, where),
            meta={name: item[name] for name in self.meta_fields if name in item},
            named_audio={
                name: self._find_audio(task_dir, item_path(item, key, where), where) for name, key in self.named_audio.items()
            },
        )

    def _id_of(self, item: Any, index: int) -> str:
        if self.id_field and isinstance(item, dict) and isinstance(item.get(self.id_field), (str, int)):
            return str(item[self.id_field])
        return f"{self._names()[0]} item {index}"

    def _clips(self, item: dict, where: str) -> list[str]:
        clips = item_field(item, self.audio_field, where)
        clips = [clips] if isinstance(clips, str) else clips
        if not isinstance(clips, list) or not clips or not all(isinstance(c, str) for c in clips):
            raise TaskDataError(f"{where}: field {self.audio_field!r} must be an audio path or a list of them.")
        return clips

    def _roots(self) -> list[str]:
        return [self.audio_root] if isinstance(self.audio_root, str) else list(self.audio_root)

    def _choices_description(self) -> str:
        if self.choices_field:
            return f"{self.choices_field} (a list, or an object keyed A, B, ...)"
        return f"{self.choice_fields[0]}..{self.choice_fields[-1]}" if self.choice_fields else "no options"

    def _choices(self, item: dict, where: str) -> tuple[str, ...]:
        if not self.choices_field:
            return tuple(str(item_field(item, name, where)) for name in self.choice_fields)
        value = item_field(item, self.choices_field, where)
        if isinstance(value, dict) and value and all(len(k) == 1 and k in LETTERS for k in value):
            return tuple(str(value[k]) for k in sorted(value))
        if isinstance(value, list) and value:
            return tuple(str(v) for v in value)
        raise TaskDataError(
            f"{where}: field {self.choices_field!r} must be a list of options or an object keyed A, B, ..."
        )

    def _excluded(self, item: dict) -> bool:
        def same(a: Any, b: Any) -> bool:
            return str(a).strip().lower() == str(b).strip().lower()

        return any(all(key in item and same(item[key], value) for key, value in rule.items()) for rule in self.exclude)

    def _find_audio(self, task_dir: Path, clip: str, where: str) -> Path:
        candidates = [task_dir / root / clip for root in self._roots()]
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        raise TaskDataError(f"{where}: audio file not found: {' or '.join(map(str, candidates))}.")
