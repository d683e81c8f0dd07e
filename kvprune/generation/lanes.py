"""Decoding a large batch as two lanes whose steps run at once, so that one lane's matrix products overlap the
other's attention.

At a large batch a decode step is two kinds of work of about the same size, one after the other: the linear
layers' matrix products (bound by the tensor cores) and the attention over every row's cache (bound by memory
bandwidth; at batch ~1,400 on the 7B shape each is ~25 ms). Split into two lanes, each a decode state of its
own with its own CUDA graph (and its own memory pool: the graphs run at the same time), whose steps are
launched on two streams, the GPU runs one lane's products while the other reads its cache. Each lane reads
the weights once per step, so this pays only where the weights are a small part of a step (large batches).

A lane is an ordinary decode state: its rows are a contiguous run of the call's rows, and the tokens are
those of one state holding every row (the same computation per row), which the tests check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from .prefill import LayerEntries, Prefill


@dataclass(frozen=True)
class Lanes:
    """How a call's rows are split: lane ``i`` holds rows ``bounds[i]..bounds[i+1]``."""

    bounds: tuple[int, ...]

    @classmethod
    def of(cls, rows: int, overlap_rows: int | None) -> "Lanes":
        """Two lanes (the first one row longer when ``rows`` is odd) if ``rows >= overlap_rows``, else one."""
        if overlap_rows is None or rows < max(2, overlap_rows):
            return cls((0, rows))
        return cls((0, -(-rows // 2), rows))

    @property
    def count(self) -> int:
        return len(self.bounds) - 1

    def rows(self, lane: int) -> int:
        return self.bounds[lane + 1] - self.bounds[lane]

    def parts(self, offset: int, batch: int) -> Iterator[tuple[int, slice, int]]:
        """For a prefilled batch of ``batch`` rows that are the call's rows ``offset..``: per lane it reaches,
        (lane, its rows within the batch, where they start within the lane)."""
        for lane in range(self.count):
            start, stop = max(offset, self.bounds[lane]), min(offset + batch, self.bounds[lane + 1])
            if start < stop:
                yield lane, slice(start - offset, stop - offset), start - self.bounds[lane]


def prefill_rows(prefill: Prefill, rows: slice) -> Prefill:
    """The rows ``rows`` of a prefill (views; each layer keeps its slots object, which groups layers)."""
    if rows == slice(0, prefill.batch):
        return prefill
    layers = [LayerEntries(e.keys[rows], e.values[rows], e.valid[rows], e.slots) for e in prefill.layers]
    return replace(prefill, layers=layers, next_positions=prefill.next_positions[..., rows, :], logits=prefill.logits[rows])


class LaneStreams:
    """Launches each lane's step on a stream of its own (CUDA), each waiting for what was queued before."""

    def __init__(self):
        self._streams: list[torch.cuda.Stream] = []

    def run(self, steps: list[Callable[[], None]], concurrent: bool) -> None:
        if not concurrent or len(steps) == 1:
            for step in steps:
                step()
            return
        main = torch.cuda.current_stream()
        while len(self._streams) < len(steps) - 1:
            self._streams.append(torch.cuda.Stream())
        side = self._streams[: len(steps) - 1]
        for stream in side:
            stream.wait_stream(main)
        steps[0]()
        for stream, step in zip(side, steps[1:]):
            with torch.cuda.stream(stream):
                step()
        for stream in side:
            main.wait_stream(stream)
