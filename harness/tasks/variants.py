"""Protocol variants: one item run several times, each run ``<item id>@<r>``, scored per run and per item.

A task names one under ``variants:``, by name or as ``{name: ..., <its options>}``; the built-in
ones are STAR-Bench's (``benchmarks/starbench/variants.py``: ``rotate_options``, ``starbench_clip_order``).

Every run keeps the item's id as ``item`` (per-item scores such as ACR group by it) and records its
run number (``run``) and the number of runs of its item (``runs``) in its metadata.
"""

from __future__ import annotations

from dataclasses import replace

from kvprune.registry import Registry

from .sample import Sample


class Variant:
    """A protocol variant: ``variant(sample)`` returns the runs of one item."""

    def __call__(self, sample: Sample) -> list[Sample]:
        raise NotImplementedError


VARIANTS: Registry[type[Variant]] = Registry("variant")


def variant_run(sample: Sample, r: int, runs: int, **changes) -> Sample:
    """Run ``r`` of ``runs`` of the item ``sample``: its id ``<id>@<r>``, its item kept, ``changes`` applied."""
    meta = {**sample.meta, **changes.pop("meta", {}), "run": r, "runs": runs}
    return replace(sample, id=f"{sample.id}@{r}", item=sample.item, meta=meta, **changes)
