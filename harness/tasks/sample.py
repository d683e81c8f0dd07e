"""What a task runs: one Sample per prompt (one run of one item), the error its data raises, and the
Grade of one model output on a sample."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


class TaskDataError(ValueError):
    """The data on disk does not fit the task: says what is wrong and which layout was expected."""


@dataclass(frozen=True)
class Sample:
    """One prompt to run: its audio clips (in prompt order), images and video (for the families that
    see), question, options and gold answer.

    ``answer`` is what the task's metrics compare with: a choice letter for multiple choice, the gold
    option's text where the official scorer matches text (MMAU, MMAR), a transcript for ASR, the
    label as a benchmark's script reads it (the AudioMarathon protocol). ``meta`` holds the item's
    metadata fields the layout keeps (category, difficulty...), written into every result row.
    A sample whose item could not be read has a ``problem`` instead: a sweep records it as that
    sample's error and goes on.
    """

    id: str  # unique within the task and stable across runs: sweeps resume by it
    audio: tuple[Path, ...]
    question: str
    choices: tuple[str, ...]  # option texts in letter order A, B, ...; () for open answers (ASR)
    answer: str
    item: str = ""  # the underlying item when one item runs as several variants; defaults to id
    meta: dict = field(default_factory=dict, compare=False)  # e.g. category, sub-category, difficulty
    named_audio: dict[str, Path] = field(default_factory=dict, compare=False)  # audio a prompt segment names
    problem: str | None = None  # why the item cannot run (the message names the item and the fix)
    position: int = 0  # the sample's place in the task's order (scores that pair items by order use it)
    images: tuple[Path, ...] = ()  # image files, in prompt order
    video: Path | None = None  # a video file (its frames, and its sound track when it has one)

    def __post_init__(self):
        if not self.item:
            object.__setattr__(self, "item", self.id)

    @classmethod
    def broken(cls, id: str, problem: str) -> Sample:
        """A sample standing for an item that cannot run."""
        return cls(id=id, audio=(), question="", choices=(), answer="", problem=problem)


@dataclass(frozen=True)
class Grade:
    """What a task made of one output on one sample: the parsed answer, the per-sample scores its
    metrics store with the row, and the error of a parser or metric that failed on this output."""

    parsed: str | None
    scores: dict[str, float]
    error: Exception | None = None
