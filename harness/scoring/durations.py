"""Audio-duration buckets: how score against duration (``sweep/analyses``) groups samples by length.

A benchmark whose own analysis buckets its audio by duration registers its buckets in
``BENCHMARK_BUCKETS`` under the ``benchmark:`` field of its tasks (per task abbreviation, and for its
suite's tasks together: AudioMarathon's ``analyse_audio_duration`` scripts); every other task is
counted in ``DEFAULT``, AudioMarathon's ``analyse_all.py`` buckets, which span every length its ten
tasks have (2 s to over 10 min).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from kvprune.registry import Registry

INF = math.inf


@dataclass(frozen=True)
class DurationBuckets:
    """One script's buckets: ``labels[i]`` holds ``edges[i] <= seconds < edges[i + 1]``."""

    script: str  # the script whose buckets these are, under src/analyse_audio_duration/
    edges: tuple[float, ...]  # one more than the labels, ascending, the last inf (the first -inf: open below)
    labels: tuple[str, ...]  # as the script writes them
    inf_in_last: bool = True  # the last bucket holds an infinite duration (``d >= start``, not ``d < inf``)

    def __post_init__(self) -> None:
        if len(self.edges) != len(self.labels) + 1 or list(self.edges) != sorted(self.edges) or self.edges[-1] != INF:
            raise ValueError(f"{self.script}: {len(self.labels)} labels need {len(self.labels) + 1} ascending edges ending at inf")

    def assign(self, seconds: float | None) -> str | None:
        """The label of the bucket the script counts ``seconds`` in; None for none (or an unknown duration)."""
        if seconds is None or math.isnan(seconds):
            return None
        last = len(self.labels) - 1
        for index, label in enumerate(self.labels):
            low, high = self.edges[index], self.edges[index + 1]
            if low <= seconds and (seconds < high or (index == last and self.inf_in_last)):
                return label
        return None

    def order(self, label: str) -> int:
        """Where ``label`` stands among the buckets (shortest first)."""
        return self.labels.index(label)


#: the buckets of a task whose benchmark has none for it: ``analyse_all.py``'s (AudioMarathon's ten tasks together)
DEFAULT = DurationBuckets("analyse_all", (0, 2, 5, 10, 15, 20, 25, 30, 35, 45, 60, 90, 120, 180, 300, 600, INF), (
        "0-2s", "2-5s", "5-10s", "10-15s", "15-20s", "20-25s", "25-30s", "30-35s", "35-45s", "45-60s", "1-1.5min",
        "1.5-2min", "2-3min", "3-5min", "5-10min", "10min+"))


@dataclass(frozen=True)
class BenchmarkBuckets:
    """A benchmark's own buckets: per task (by its abbreviation) and for its suite's tasks together."""

    by_task: Mapping[str, DurationBuckets]  # a task it names no buckets for is counted in DEFAULT
    together: DurationBuckets | None = None  # None: its suite has no view of its tasks together


#: a benchmark (its tasks' ``benchmark:`` field) -> its buckets; registered by its folder
BENCHMARK_BUCKETS: Registry[BenchmarkBuckets] = Registry("duration buckets")


def task_buckets(benchmark: str, abbreviation: str) -> DurationBuckets:
    """A task's buckets: its benchmark's for it, else ``DEFAULT``."""
    own = BENCHMARK_BUCKETS.get(benchmark).by_task if benchmark in BENCHMARK_BUCKETS else {}
    return own.get(abbreviation, DEFAULT)


def suite_buckets(benchmark: str) -> DurationBuckets | None:
    """The buckets of a suite's tasks together (None: its benchmark has no such view)."""
    return BENCHMARK_BUCKETS.get(benchmark).together if benchmark in BENCHMARK_BUCKETS else None
