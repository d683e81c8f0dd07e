"""The sweep's schedule: the passes it makes, which samples each pass takes, the order they run in, how
they are cut into batches and when a call runs again. One rule, which the sweep runs (``runner``,
``samples``) and ``kvprune estimate`` prices.

The scoring pass runs every sample once, in batches of ``--batch-size``, the audio encoder's outputs
and the layers < K of the token presses shared between a sample's runs unless ``--no-reuse-encoder``
and ``--no-share-layers`` say otherwise. A scoring pass that shares anything (a batch of several, an
output reused) times only its batches; the timing pass then runs each task's first
``--timing-samples`` samples (those that can run) alone, nothing shared, for per-sample times
(rows ``pass: timing``). A scoring pass that shares nothing times each sample itself, and is the only pass.

A batched pass orders a task's samples by the length of their audio (shortest first; samples of
equal or unknown length keep the data's order) before cutting them into batches, so that the rows
of a batch have similar lengths: each row is prefilled on its own, but the rows decode together, and
a batch's decoding runs as long as its longest answer over caches as long as its longest prompt.
Every row keeps its sample's identity (its id, its place in the task), and the outputs read rows by
identity, never by the order they were written in: scores do not change. The timing pass runs one
sample at a time, in the data's order.

Calls run again twice over: a batch whose call fails runs again one sample at a time (so that one
bad sample costs only its own row), and a timed call that compiled or captured a graph runs again,
warm (``Pass.times_again``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from .plan import PlannedRun, PlannedSample
from .store import TIMING_PASS

Item = TypeVar("Item")


@dataclass(frozen=True)
class Pass:
    """How a pass runs its batches: decoded together or not, encoder outputs and layers < K reused or
    not, and whether its rows time each sample (``timed``) or only the batch."""

    name: str | None  # None: the pass that scores (every sample once); TIMING_PASS: the timing subset
    reuse_encoder: bool
    timed: bool
    share_layers: bool = False  # layers < K computed once per sample for the token presses at K
    batch_size: int = 1

    def times_again(self, compiled: bool) -> bool:
        """Whether a call runs again, warm: a call of a timed pass that compiled or captured a graph."""
        return self.timed and compiled


ALONE = Pass(TIMING_PASS, reuse_encoder=False, timed=True)  # the timing pass: one sample a call, nothing shared


class Work(NamedTuple):
    """One sample under the runs a pass still has to run on it."""

    sample: PlannedSample
    runs: list[PlannedRun]


@dataclass(frozen=True)
class Schedule:
    """The passes of a sweep's configuration, and the size of its timing subset."""

    passes: tuple[Pass, ...]
    timing_samples: int  # of each task's samples, the first this many also run in the timing pass

    @classmethod
    def of(cls, config) -> Schedule:
        """The schedule of ``config`` (a ``SweepConfig``, or an estimate's)."""
        shared = config.batch_size > 1 or config.reuse_encoder or config.share_layers
        scoring = Pass(None, reuse_encoder=config.reuse_encoder, timed=not shared, share_layers=config.share_layers,
                       batch_size=config.batch_size)
        passes = (scoring, ALONE) if shared and config.timing_samples else (scoring,)
        return cls(passes, config.timing_samples)

    @property
    def scoring(self) -> Pass:
        return self.passes[0]

    def timing_count(self, samples: int) -> int:
        """How many of a task's ``samples`` (all of which can run) the timing pass also runs."""
        return min(self.timing_samples, samples) if len(self.passes) > 1 else 0

    def takes(self, how: Pass, place: int, planned: PlannedSample) -> bool:
        """Whether the pass ``how`` runs the sample at ``place`` in its task: the scoring pass every
        sample, the timing pass the task's first ``timing_samples`` that can run."""
        return how.name != TIMING_PASS or (place < self.timing_samples and not planned.sample.problem)

    def work(self, samples: Iterable[tuple[int, PlannedSample]],
             todo: Callable[[Pass, PlannedSample], list[PlannedRun]]) -> list[tuple[Pass, list[Work]]]:
        """Per pass, in order, the samples it takes (each at its ``place`` in the task) under the runs
        ``todo`` says they still need; a sample that needs none is left out."""
        samples = list(samples)
        work = []
        for how in self.passes:
            pending = [Work(planned, runs) for place, planned in samples if self.takes(how, place, planned)
                       for runs in [todo(how, planned)] if runs]
            work.append((how, pending))
        return work

    def batches(self, how: Pass, work: list[Work]) -> list[list[Work]]:
        """``work`` cut into the batches ``how`` runs (by length when batched)."""
        return batches(work, how.batch_size)


def by_length(pending: list[Item]) -> list[Item]:
    """``pending`` (items whose first member is a ``PlannedSample``: ``Work``) ordered by audio length,
    shortest first; a stable sort, so ties and samples of unknown length keep their order (the latter last)."""
    def key(item) -> tuple[bool, float]:
        seconds = item[0].seconds
        return seconds is None, seconds or 0.0

    return sorted(pending, key=key)


def batches(pending: list[Item], size: int) -> list[list[Item]]:
    """``pending`` cut into batches of ``size`` (the last may be smaller), by length first when ``size`` > 1."""
    items = by_length(pending) if size > 1 else list(pending)
    return [items[start : start + size] for start in range(0, len(items), size)]
