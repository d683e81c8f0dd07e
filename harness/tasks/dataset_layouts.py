"""Dataset readers: the native data layouts of benchmark datasets, registered by name.

A layout is a small dataclass built from a task's ``layout_options``. ``load(task_dir)`` reads one
task folder into Samples in a deterministic order and checks that every audio file it references
exists. A problem with the whole folder (no metadata file, not JSON, no items) raises
``TaskDataError``; a problem with one item (a missing field or audio file, a gold answer that is no
option) makes that item a ``Sample.broken`` whose message names the item and the fix, so one bad
item does not stop a sweep. ``describe(task_dir)`` says what the layout expects (the task appends it
to errors); ``metadata_fields()`` which metadata keys its samples carry (None: it cannot say), and
``audio_names()`` the named audio files a prompt segment may use. Several tasks share one layout with
different options.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kvprune.registry import Registry

from ..official import avibench
from ..official.records import read_records
from .prompts import LETTERS
from .sample import Sample, TaskDataError


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
    (``#2``, ``#3``... on repeats).
    """

    metadata: str
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
        if not isinstance(self.metadata, str) or not self.metadata:
            raise ValueError("metadata must be the metadata file's name")
        if isinstance(self.exclude, (str, dict)) or not all(isinstance(rule, dict) for rule in self.exclude):
            raise ValueError("exclude must be a list of {field: value} rules")
        if self.gold not in GOLD_FORMS:
            raise ValueError(f"gold={self.gold!r}; choose one of {', '.join(GOLD_FORMS)}")
        if isinstance(self.meta_fields, str) or not all(isinstance(f, str) for f in self.meta_fields):
            raise ValueError("meta_fields must be a list of field names")
        if not isinstance(self.named_audio, Mapping) or not all(isinstance(v, str) for v in self.named_audio.values()):
            raise ValueError("named_audio must map names to audio fields, {name: field}")

    def describe(self, task_dir: str) -> str:
        container = f'an object {{"{self.items_key}": [items]}}' if self.items_key else (
            "JSON lines, one item each" if ".jsonl" in self.metadata else "a JSON list of items")
        fields = [self.audio_field, *self.named_audio.values(), self.question_field, self._choices_description(),
                  f"{self.answer_field} ({GOLD_FORMS[self.gold]})"]
        roots = " or ".join(f"{task_dir}/{root}".removesuffix("/.") for root in self._roots())
        return (
            f"{task_dir}/{self.metadata} holding {container} with fields {{{', '.join(fields)}}}; "
            f"audio paths relative to {roots}"
        )

    def metadata_fields(self) -> set[str]:
        return set(self.meta_fields)

    def audio_names(self) -> tuple[str, ...]:
        return tuple(self.named_audio)

    def load(self, task_dir: Path) -> list[Sample]:
        path = task_dir / self.metadata
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
            sample_id = str(_field(item, self.id_field, where))
        else:
            uses_of_clip[clips[0]] += 1
            sample_id = clips[0] if uses_of_clip[clips[0]] == 1 else f"{clips[0]}#{uses_of_clip[clips[0]]}"
        where = f"{where} (sample {sample_id})"
        choices = self._choices(item, where)
        return Sample(
            id=sample_id,
            audio=tuple(self._find_audio(task_dir, clip, where) for clip in clips),
            question=str(_field(item, self.question_field, where)),
            choices=choices,
            answer=gold_answer(_field(item, self.answer_field, where), choices, self.gold, where),
            meta={name: item[name] for name in self.meta_fields if name in item},
            named_audio={
                name: self._find_audio(task_dir, _text(item, key, where), where) for name, key in self.named_audio.items()
            },
        )

    def _id_of(self, item: Any, index: int) -> str:
        if self.id_field and isinstance(item, dict) and isinstance(item.get(self.id_field), (str, int)):
            return str(item[self.id_field])
        return f"{self.metadata} item {index}"

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
        return f"{self.choice_fields[0]}..{self.choice_fields[-1]}" if self.choice_fields else "no options"

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

    def metadata_fields(self) -> set[str]:
        return {"speaker_id", "chapter_id"}

    def audio_names(self) -> tuple[str, ...]:
        return ()

    def load(self, task_dir: Path) -> list[Sample]:
        split_dir = task_dir / self.split
        if not split_dir.is_dir():
            raise TaskDataError(f"split folder {split_dir} not found.")
        samples = []
        for chapter_dir in sorted(p for p in split_dir.glob("*/*") if p.is_dir()):
            speaker, chapter = chapter_dir.parent.name, chapter_dir.name
            listed = _chapter_transcripts(chapter_dir / f"{speaker}-{chapter}.trans.txt")
            for utterance in sorted(u for u in listed if not (chapter_dir / f"{u}.flac").is_file()):
                samples.append(Sample.broken(utterance, (
                    f"{chapter_dir}: audio file {utterance}.flac, listed in {speaker}-{chapter}.trans.txt, not found."
                )))
            for flac in sorted(chapter_dir.glob("*.flac")):
                own = flac.with_suffix(".txt")
                text = own.read_text(encoding="utf-8").strip() if own.is_file() else listed.get(flac.stem)
                if not text:
                    samples.append(Sample.broken(flac.stem, (
                        f"no transcript for {flac}: {own.name} and the {speaker}-{chapter}.trans.txt line "
                        "are missing or empty."
                    )))
                    continue
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
    label, and the option letters follow ``folders`` (A = the first folder, B = the second...). The
    answer is the letter, or with ``gold: folder`` the folder's name (as AudioMarathon's script reads it)."""

    folders: Sequence[str]
    pattern: str = "*.wav"
    gold: str = "letter"

    def __post_init__(self):
        if isinstance(self.folders, str) or not self.folders or not all(isinstance(f, str) for f in self.folders):
            raise ValueError("folders must be a list of folder names, one per class")
        if self.gold not in ("letter", "folder"):
            raise ValueError(f"gold={self.gold!r}; choose letter or folder")

    def describe(self, task_dir: str) -> str:
        letters = ", ".join(f"{LETTERS[i].lower()} = {folder}" for i, folder in enumerate(self.folders))
        return f"{task_dir}/{{{','.join(self.folders)}}}/{self.pattern}, the folder being the label ({letters})"

    def metadata_fields(self) -> set[str]:
        return {"label"}

    def audio_names(self) -> tuple[str, ...]:
        return ()

    def load(self, task_dir: Path) -> list[Sample]:
        samples = []
        for index, folder in enumerate(self.folders):
            class_dir = task_dir / folder
            if not class_dir.is_dir():
                raise TaskDataError(f"class folder {class_dir} not found.")
            samples += [
                Sample(
                    id=f"{folder}/{path.name}", audio=(path,), question="", choices=tuple(self.folders),
                    answer=LETTERS[index] if self.gold == "letter" else folder, meta={"label": folder},
                )
                for path in sorted(class_dir.glob(self.pattern))
            ]
        return samples


@LAYOUTS.register("avibench")
@dataclass(frozen=True)
class AviBenchEntries:
    """An AVI-Bench task folder (``levels/<stage>/<TASK>``): ``data.json``, a list of entries whose
    media paths start ``./input``, and ``input/``. The question text is the official one
    (``avibench.text_input``: the entry's ``prompt`` and ``options`` keys resolved through the
    benchmark's constants); choices are the resolved options; the answer is ``question_answer`` as
    text (AMIC's ``{class: count}`` as JSON). Each sample keeps ``task``, ``subtask`` and the raw
    ``entry`` (the official scorers read it). ``pre_<id>`` entries (ASQA's double-confirm checks) are
    samples like any other."""

    metadata: str = "data.json"

    def describe(self, task_dir: str) -> str:
        return (f"{task_dir}/{self.metadata}, a list of entries {{id, task, subtask, input: {{question: {{prompt, text, "
                f"options}}, audio_list}}, output: {{question_answer}}}}, audio under {task_dir}/input")

    def metadata_fields(self) -> set[str]:
        return {"task", "subtask", "entry"}

    def audio_names(self) -> tuple[str, ...]:
        return ()

    def load(self, task_dir: Path) -> list[Sample]:
        path = task_dir / self.metadata
        samples = []
        for index, entry in enumerate(read_items(path)):
            entry_id = str(entry.get("id", f"{self.metadata} item {index}")) if isinstance(entry, dict) else f"item {index}"
            try:
                samples.append(self._sample(task_dir, entry, f"{path.name} item {index} (id {entry_id})"))
            except TaskDataError as error:
                samples.append(Sample.broken(entry_id, str(error)))
        return samples

    def _sample(self, task_dir: Path, entry: Any, where: str) -> Sample:
        try:
            media = entry["input"]
            entry_id, answer = str(entry["id"]), entry["output"]["question_answer"]
            text = avibench.text_input(entry)
            options = avibench.resolve(entry, "options")
        except (KeyError, TypeError) as error:
            raise TaskDataError(f"{where}: missing field {error}; an entry needs id, task, input.question.text and "
                                "output.question_answer.") from None
        except ValueError as error:
            raise TaskDataError(f"{where}: {error}.") from None
        audio = []
        for clip in media.get("audio_list") or []:
            found = Path(avibench.media_path(clip, str(task_dir)))
            if not found.is_file():
                raise TaskDataError(f"{where}: audio file not found: {found}.")
            audio.append(found)
        if not audio:
            raise TaskDataError(f"{where}: no audio_list; the audio-only tasks need one clip at least.")
        return Sample(
            id=entry_id, audio=tuple(audio), question=text, choices=tuple(options) if isinstance(options, list) else (),
            answer=json.dumps(answer) if isinstance(answer, dict) else str(answer),
            meta={"task": entry.get("task"), "subtask": entry.get("subtask"), "entry": entry},
        )


def _field(item: dict, name: str, where: str) -> Any:
    if name not in item:
        raise TaskDataError(f"{where} has no field {name!r}; add it to the item or set the layout's field name.")
    return item[name]


def _text(item: dict, name: str, where: str) -> str:
    value = _field(item, name, where)
    if not isinstance(value, str):
        raise TaskDataError(f"{where}: field {name!r} must be an audio path.")
    return value
