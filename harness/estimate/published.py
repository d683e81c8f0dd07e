"""The sizes benchmarks publish for their tasks: how many samples and how long their audio runs, so
that ``kvprune estimate`` can price a sweep before the data is on disk.

AudioMarathon: sample counts from its README's task tables (they add up to 6,567, where its text says
6,563: its Speaker Recognition table lists 185 + 776 + 959 + 1,614 = 3,534 under a heading of 3,530)
and duration ranges from its dataset card (Hugging Face ``Hezep/AudioMarathon``, "Dataset
Statistics"); the card's row for VoxCeleb age was cut off where it was read, so ``vox_age`` takes the
range of ``vox_gender``, the same VoxCeleb source (marked as such).
"""

from __future__ import annotations

from dataclasses import dataclass

AUDIOMARATHON = "AudioMarathon README (task tables) and dataset card Hezep/AudioMarathon (durations)"


@dataclass(frozen=True)
class PublishedSize:
    samples: int
    seconds: tuple[float, float]  # the shortest and longest audio of the task
    source: str
    note: str = ""
    answer: str = "letter"  # what its answers are: an option's letter, or a transcript of the speech (``answers``)


PUBLISHED: dict[str, PublishedSize] = {
    "librispeech": PublishedSize(204, (60.0, 240.0), AUDIOMARATHON, answer="transcript"),
    "race": PublishedSize(820, (120.0, 253.2), AUDIOMARATHON),
    "slue": PublishedSize(490, (165.0, 300.0), AUDIOMARATHON),
    "tau": PublishedSize(1145, (90.0, 210.0), AUDIOMARATHON),
    "gtzan": PublishedSize(120, (240.0, 240.0), AUDIOMARATHON),
    "desed": PublishedSize(254, (270.0, 300.0), AUDIOMARATHON),
    "vesus": PublishedSize(185, (90.0, 120.0), AUDIOMARATHON),
    "had": PublishedSize(776, (180.0, 300.0), AUDIOMARATHON),
    "vox_age": PublishedSize(959, (90.0, 210.0), AUDIOMARATHON, "duration range: vox_gender's (same VoxCeleb source)"),
    "vox_gender": PublishedSize(1614, (90.0, 210.0), AUDIOMARATHON),
}


def published(task: str) -> PublishedSize | None:
    """What is published of ``task`` (None: nothing recorded; the task's data must be present)."""
    return PUBLISHED.get(task)
