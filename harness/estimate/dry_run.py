"""``kvprune sweep --preset NAME``: a dry run of the whole sweep at a real model's shape before its
checkpoint is fetched. The sweep runs as it would (its batches ordered by length, sharing, the timing
subset, compilation, every output), on a model with random weights at the bench preset's shape, on
made-up prompts at each task's published durations (or its data's, with ``--data-root``) whose
answers are decoded to their planned lengths (``synthetic.SyntheticPrompts``). What it tells is
memory, compile behaviour and time; every output says it is a dry run, and its scores mean nothing.
It is also what ``kvprune estimate`` is checked against at a preset's shape (``check``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..sweep.config import SweepConfig, SweepConfigError
from ..tasks.suites import expand_suites
from ..tasks.task import get_task
from .published import published
from .synthetic import SyntheticPrompts, has_data


@dataclass
class DryRunConfig(SweepConfig):
    preset: str | None = None  # the bench preset whose shape the model has (random weights)

    def check_inputs(self) -> None:
        """A known preset (no --model but its own name), tasks whose durations are published or whose
        data is under --data-root."""
        from ..bench.presets import PRESETS

        if self.preset not in PRESETS:
            raise SweepConfigError(f"unknown preset {self.preset!r}; the presets are {', '.join(PRESETS.names())}.")
        if self.models not in ([], [self.preset]):
            raise SweepConfigError("give --model (a checkpoint) or --preset (a dry run at a preset's shape), not both.")
        self.models = [self.preset]
        if not self.tasks:
            raise SweepConfigError("no task given: pass --tasks (a dry run makes up prompts at each task's durations).")
        if self.data_root is not None and not Path(self.data_root).is_dir():
            raise SweepConfigError(f"data root {self.data_root} is not a directory: pass --data-root DIR, or leave it "
                                   "out for each task's published durations.")
        for name in expand_suites(self.tasks):
            task = get_task(name)
            if not has_data(self.data_root, task) and published(task.name) is None:
                raise SweepConfigError(f"task {task.name}: nothing is published of its durations here "
                                       "(harness/estimate/published.py); give --data-root with its data.")

    @classmethod
    def overrides(cls, args) -> dict:
        return dict(super().overrides(args), preset=args.preset)


def dry_run_source(config: DryRunConfig) -> SyntheticPrompts:
    """Random weights at the preset's shape, made-up prompts at the tasks' durations."""
    from ..bench.presets import PRESETS

    return SyntheticPrompts(PRESETS.get(config.preset), config.data_root,
                            dry_run=f"random weights at the shape of bench preset {config.preset}")
