"""The order a task's samples run in and how they are cut into batches: one rule, which the sweep
runs and ``kvprune estimate`` prices.

The scoring pass of a batched sweep orders a task's samples by the length of their audio (shortest
first; samples of equal or unknown length keep the data's order) before cutting them into batches of
``--batch-size``, so that the rows of a batch have similar lengths: each row is prefilled on its own,
but the rows decode together, and a batch's decoding runs as long as its longest answer over caches
as long as its longest prompt. Every row keeps its sample's identity (its id, its place in the task),
and the outputs read rows by identity, never by the order they were written in: scores do not change.
The timing subset runs one sample at a time, in the data's order.
"""

from __future__ import annotations

from typing import TypeVar

from .samples import Pass
from .store import TIMING_PASS

Item = TypeVar("Item")


def sweep_passes(config) -> list[Pass]:
    """The scoring pass (batched, encoder outputs and layers < K shared), then the timing pass on a subset
    when the scoring pass does not time each sample on its own (``config``: a ``SweepConfig``)."""
    shared = config.batch_size > 1 or config.reuse_encoder or config.share_layers
    scoring = Pass(None, reuse_encoder=config.reuse_encoder, timed=not shared, share_layers=config.share_layers)
    return [scoring, Pass(TIMING_PASS, reuse_encoder=False, timed=True)] if shared and config.timing_samples else [scoring]


def by_length(pending: list[Item], planned=lambda item: item[0]) -> list[Item]:
    """``pending`` (items whose ``planned(item)`` is a ``PlannedSample``) ordered by audio length,
    shortest first; a stable sort, so ties and samples of unknown length keep their order (the latter last)."""
    def key(item) -> tuple[bool, float]:
        seconds = planned(item).seconds
        return seconds is None, seconds or 0.0

    return sorted(pending, key=key)


def batches(pending: list[Item], size: int, ordered: bool = True, planned=lambda item: item[0]) -> list[list[Item]]:
    """``pending`` cut into batches of ``size`` (the last may be smaller); ``ordered``: by length first
    (batches of more than one sample)."""
    items = by_length(pending, planned) if ordered and size > 1 else list(pending)
    return [items[start : start + size] for start in range(0, len(items), size)]
