"""The ``avibench`` layout: an AVI-Bench task folder, its entries resolved as the official code does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...official import avibench
from ..sample import Sample, TaskDataError
from .base import LAYOUTS, read_items


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
