"""The ``avibench`` layout: an AVI-Bench task folder, its entries resolved as the official code does."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...dataset_layouts.base import LAYOUTS, read_items
from ...sample import Sample, TaskDataError
from . import rules


@LAYOUTS.register("avibench")
@dataclass(frozen=True)
class AviBenchEntries:
    """An AVI-Bench task folder (``levels/<stage>/<TASK>``): ``data.json``, a list of entries whose
    media paths (``image_list``, ``audio_list``, ``video``) start ``./input``, and ``input/``. The
    question text is the official one (``rules.text_input``: the entry's ``prompt`` and
    ``options`` keys resolved through the benchmark's constants); choices are the resolved options
    (a list; a class list given as text stays in the question only); the answer is
    ``question_answer`` as text (a dict or list as JSON). Each sample keeps ``task``, ``subtask`` and
    the raw ``entry`` (the official scorers read it). ``pre_<id>`` entries (double-confirm checks) are
    samples like any other. An entry needs at least one medium; one whose media files are missing is
    a sample with a ``problem`` that keeps its answer and entry (its error row is an entry without a
    reply, which the evaluator skips)."""

    metadata: str = "data.json"

    def describe(self, task_dir: str) -> str:
        return (f"{task_dir}/{self.metadata}, a list of entries {{id, task, subtask, input: {{question: {{prompt, text, "
                f"options}}, image_list, audio_list, video}}, output: {{question_answer}}}}, media under {task_dir}/input")

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
            text = rules.text_input(entry)
            options = rules.resolve(entry, "options")
        except (KeyError, TypeError) as error:
            raise TaskDataError(f"{where}: missing field {error}; an entry needs id, task, input.question.text and "
                                "output.question_answer.") from None
        except ValueError as error:
            raise TaskDataError(f"{where}: {error}.") from None
        sample = Sample(
            id=entry_id, audio=(), question=text, choices=tuple(options) if isinstance(options, list) else (),
            answer=json.dumps(answer) if isinstance(answer, (dict, list)) else str(answer),
            meta={"task": entry.get("task"), "subtask": entry.get("subtask"), "entry": entry},
        )
        try:  # an entry whose media cannot be read keeps its answer and entry: its error row is scored as no reply
            audio = _files(media.get("audio_list") or [], task_dir, "audio", where)
            images = _files(media.get("image_list") or [], task_dir, "image", where)
            video = _files([media["video"]] if media.get("video") is not None else [], task_dir, "video", where)
            if not (audio or images or video):
                raise TaskDataError(f"{where}: no image_list, audio_list or video; an entry needs one medium at least.")
        except TaskDataError as error:
            return replace(sample, problem=str(error))
        return replace(sample, audio=audio, images=images, video=video[0] if video else None)


def _files(paths, task_dir: Path, what: str, where: str) -> tuple[Path, ...]:
    """An entry's media paths in its task folder, each checked to exist."""
    if not isinstance(paths, list):
        raise TaskDataError(f"{where}: {what} paths must be a list, got {paths!r}.")
    found = tuple(Path(rules.media_path(str(path), str(task_dir))) for path in paths)
    missing = [str(path) for path in found if not path.is_file()]
    if missing:
        raise TaskDataError(f"{where}: {what} file not found: {missing[0]}.")
    return found
