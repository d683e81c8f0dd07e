"""Layouts read from folder trees: ``librispeech`` (one Sample per utterance file) and
``folder_labels`` (one folder per class)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..prompts import LETTERS
from ..sample import Sample, TaskDataError
from .base import LAYOUTS


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
