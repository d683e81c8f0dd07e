"""Dataset readers: the native data layouts of benchmark datasets, registered by name.

A layout is a small dataclass built from a task's ``layout_options``. ``load(task_dir)`` reads one
task folder into Samples in a deterministic order, checks that every audio file it references
exists, and raises ``TaskDataError`` saying what is wrong; ``describe(task_dir)`` says what it expects
(the task appends that to the error). Several tasks share one layout with different options.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kvprune.registry import Registry

from .task import LETTERS, Sample, TaskDataError


class Layout(Protocol):
    def load(self, task_dir: Path) -> list[Sample]: ...

    def describe(self, task_dir: str) -> str: ...


LAYOUTS: Registry[type[Layout]] = Registry("dataset layout")


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


@LAYOUTS.register("json_items")
@dataclass(frozen=True)
class JsonItems:
    """A JSON file of question items, one Sample each (RACE, SLUE, TAU, GTZAN, DESED, VESUS, VoxCeleb).

    ``audio_root`` is the folder (or folders, tried in order) the items' audio paths are relative to;
    an item's audio field may hold one path or a list (several clips in prompt order). Choices come
    from several fields (``choice_fields``) or one field holding a list or an object keyed A, B, ...
    (``choices_field``). ``exclude`` drops items whose fields all equal one rule's values.
    Sample ids are the ``id_field`` value, or the first audio path (``#2``, ``#3``... on repeats).
    """

    metadata: str
    items_key: str | None = None
    audio_root: str | Sequence[str] = "."
    audio_field: str = "path"
    question_field: str = "question"
    choice_fields: Sequence[str] = ("choice_a", "choice_b", "choice_c", "choice_d")
    choices_field: str | None = None
    answer_field: str = "answer_gt"
    id_field: str | None = None
    meta_fields: Sequence[str] = ()
    exclude: Sequence[dict] = ()

    def __post_init__(self):
        if not isinstance(self.metadata, str) or not self.metadata:
            raise ValueError("metadata must be the metadata file's name")
        if isinstance(self.exclude, (str, dict)) or not all(isinstance(rule, dict) for rule in self.exclude):
            raise ValueError("exclude must be a list of {field: value} rules")

    def describe(self, task_dir: str) -> str:
        container = f'an object {{"{self.items_key}": [items]}}' if self.items_key else "a JSON list of items"
        fields = [self.audio_field, self.question_field, self._choices_description(), self.answer_field]
        roots = " or ".join(f"{task_dir}/{root}".removesuffix("/.") for root in self._roots())
        return (
            f"{task_dir}/{self.metadata} holding {container} with fields {{{', '.join(fields)}}}; "
            f"audio paths relative to {roots}"
        )

    def load(self, task_dir: Path) -> list[Sample]:
        path = task_dir / self.metadata
        if not path.is_file():
            raise TaskDataError(f"{path} not found.")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise TaskDataError(f"{path} is not valid JSON ({error}).") from None
        if self.items_key:
            items = data.get(self.items_key) if isinstance(data, dict) else None
        else:
            items = data
        if not isinstance(items, list):
            container = f'an object with a list under "{self.items_key}"' if self.items_key else "a JSON list"
            raise TaskDataError(f"{path} is not {container}.")

        samples, uses_of_clip = [], Counter()
        for index, item in enumerate(items):
            where = f"{path.name} item {index}"
            if not isinstance(item, dict):
                raise TaskDataError(f"{where} is not a JSON object.")
            if self._excluded(item):
                continue
            clips = self._clips(item, where)
            if self.id_field:
                sample_id = str(_field(item, self.id_field, where))
            else:
                uses_of_clip[clips[0]] += 1
                sample_id = clips[0] if uses_of_clip[clips[0]] == 1 else f"{clips[0]}#{uses_of_clip[clips[0]]}"
            choices = self._choices(item, where)
            samples.append(Sample(
                id=sample_id,
                audio=tuple(self._find_audio(task_dir, clip, where) for clip in clips),
                question=str(_field(item, self.question_field, where)),
                choices=choices,
                answer=gold_letter(_field(item, self.answer_field, where), choices, where),
                meta={name: item[name] for name in self.meta_fields if name in item},
            ))
        repeated = [i for i, n in Counter(s.id for s in samples).items() if n > 1]
        if repeated:
            raise TaskDataError(f"{path}: sample ids repeat ({', '.join(repeated[:3])}); set a unique id_field.")
        return samples

    def _clips(self, item: dict, where: str) -> list[str]:
        clips = _field(item, self.audio_field, where)
        clips = [clips] if isinstance(clips, str) else clips
        if not isinstance(clips, list) or not clips or not all(isinstance(c, str) for c in clips):
            raise TaskDataError(f"{where}: field {self.audio_field!r} must be an audio path or a list of them.")
        return clips

    def _roots(self) -> list[str]:
        return [self.audio_root] if isinstance(self.audio_root, str) else list(self.audio_root)

    def _choices_description(self) -> str:
        if self.choices_field:
            return f"{self.choices_field} (a list, or an object keyed A, B, ...)"
        return f"{self.choice_fields[0]}..{self.choice_fields[-1]}"

    def _choices(self, item: dict, where: str) -> tuple[str, ...]:
        if not self.choices_field:
            return tuple(str(_field(item, name, where)) for name in self.choice_fields)
        value = _field(item, self.choices_field, where)
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


@LAYOUTS.register("librispeech")
@dataclass(frozen=True)
class LibriSpeechTree:
    """The LibriSpeech tree ``<split>/<speaker>/<chapter>/<utterance>.flac``, one Sample per file.

    A transcript comes from ``<utterance>.txt`` beside the audio (AudioMarathon's LibriSpeech-long) or
    from the chapter's ``<speaker>-<chapter>.trans.txt`` lines ``<utterance> TEXT`` (the native tree).
    """

    split: str = "test-clean"

    def describe(self, task_dir: str) -> str:
        return (
            f"{task_dir}/{self.split}/<speaker>/<chapter>/<utterance>.flac, each transcribed in <utterance>.txt "
            "beside it or in a line '<utterance> TEXT' of <speaker>-<chapter>.trans.txt"
        )

    def load(self, task_dir: Path) -> list[Sample]:
        split_dir = task_dir / self.split
        if not split_dir.is_dir():
            raise TaskDataError(f"split folder {split_dir} not found.")
        samples = []
        for chapter_dir in sorted(p for p in split_dir.glob("*/*") if p.is_dir()):
            speaker, chapter = chapter_dir.parent.name, chapter_dir.name
            listed = _chapter_transcripts(chapter_dir / f"{speaker}-{chapter}.trans.txt")
            missing = [u for u in listed if not (chapter_dir / f"{u}.flac").is_file()]
            if missing:
                raise TaskDataError(
                    f"{chapter_dir}: audio file {missing[0]}.flac, listed in {speaker}-{chapter}.trans.txt, not found."
                )
            for flac in sorted(chapter_dir.glob("*.flac")):
                own = flac.with_suffix(".txt")
                text = own.read_text(encoding="utf-8").strip() if own.is_file() else listed.get(flac.stem)
                if not text:
                    raise TaskDataError(
                        f"no transcript for {flac}: {own.name} and the {speaker}-{chapter}.trans.txt line "
                        "are missing or empty."
                    )
                samples.append(Sample(
                    id=flac.stem, audio=(flac,), question="", choices=(), answer=text,
                    meta={"speaker_id": speaker, "chapter_id": chapter},
                ))
        return samples


def _chapter_transcripts(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    transcripts = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            utterance, _, text = line.strip().partition(" ")
            if not text.strip():
                raise TaskDataError(f"{path} line {number} has an utterance id but no transcript.")
            transcripts[utterance] = text.strip()
    return transcripts


@LAYOUTS.register("folder_labels")
@dataclass(frozen=True)
class FolderLabels:
    """One folder per class holding its audio files (HAD's ``real/`` and ``fake/``): the folder is the
    label, and the option letters follow ``folders`` (A = the first folder, B = the second...)."""

    folders: Sequence[str]
    pattern: str = "*.wav"

    def __post_init__(self):
        if isinstance(self.folders, str) or not self.folders or not all(isinstance(f, str) for f in self.folders):
            raise ValueError("folders must be a list of folder names, one per class")

    def describe(self, task_dir: str) -> str:
        letters = ", ".join(f"{LETTERS[i].lower()} = {folder}" for i, folder in enumerate(self.folders))
        return f"{task_dir}/{{{','.join(self.folders)}}}/{self.pattern}, the folder being the label ({letters})"

    def load(self, task_dir: Path) -> list[Sample]:
        samples = []
        for index, folder in enumerate(self.folders):
            class_dir = task_dir / folder
            if not class_dir.is_dir():
                raise TaskDataError(f"class folder {class_dir} not found.")
            samples += [
                Sample(
                    id=f"{folder}/{path.name}", audio=(path,), question="", choices=tuple(self.folders),
                    answer=LETTERS[index], meta={"label": folder},
                )
                for path in sorted(class_dir.glob(self.pattern))
            ]
        return samples


def _field(item: dict, name: str, where: str) -> Any:
    if name not in item:
        raise TaskDataError(f"{where} has no field {name!r}.")
    return item[name]
