"""``kvprune estimate``'s configuration: a sweep's (the same file and options, the same defaults: with no
model, the embedded demo on its suite), plus what the estimate itself needs: a bench preset instead
of a checkpoint, and how much to time."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from ..sweep.config import AUTO, SweepConfig, SweepConfigError, add_sweep_arguments

DESCRIPTION = ("what a sweep will cost on this device, before its first sample: hours per task one sample at a "
               "time, with the sweep's batching and sharing, and AudioMarathon's way")
MODES = ("batch1", "sweep", "audiomarathon")


@dataclass
class EstimateConfig(SweepConfig):
    preset: str | None = None  # a bench preset (the real architecture, random weights) instead of --model
    samples_per_task: int = 2  # samples timed one at a time per task (batch 1, AudioMarathon's way)
    batches_per_task: int = 2  # scoring batches timed per task (the first and last of its full ones, spread between)
    repeats: int = 3  # times each timed batch or sample runs: its figures are medians, with their spread
    timed_ratios: int = 3  # ratios timed per method: its lowest, (middle,) highest; the others interpolated
    modes: list[str] = field(default_factory=lambda: list(MODES))

    def check_inputs(self) -> None:
        """One model or a preset, tasks, and a data folder only if one is named (else published sizes)."""
        if self.models and self.preset:
            raise SweepConfigError("give --model (a checkpoint) or --preset (random weights at a bench preset's shape), "
                                   "not both.")
        if len(self.models) > 1:
            raise SweepConfigError(f"an estimate prices one model; --model names {len(self.models)}: run one estimate "
                                   "per model.")
        if self.preset is not None:
            from ..bench.presets import PRESETS

            if self.preset not in PRESETS:
                raise SweepConfigError(f"unknown preset {self.preset!r}; the presets are {', '.join(PRESETS.names())}.")
        elif not self.models:
            raise SweepConfigError("no model given: pass --model (a checkpoint folder or Hugging Face id) or --preset.")
        else:
            _check_checkpoint(self.models[0], self.trust_remote_code)
        if not self.tasks:
            raise SweepConfigError("no task given: pass --tasks (see `kvprune tasks`; a suite such as audiomarathon).")
        if self.batch_size == AUTO:
            raise SweepConfigError("an estimate prices one batch size: give a number (`kvprune sweep --batch-size auto` "
                                   "prices a few and runs the cheapest).")
        if self.data_root is not None and not Path(self.data_root).is_dir():
            raise SweepConfigError(f"data root {self.data_root} is not a directory: pass --data-root DIR, or leave it "
                                   "out to price the tasks by their published sizes.")
        if self.timed_ratios not in (2, 3):
            raise SweepConfigError(f"timed_ratios={self.timed_ratios!r} is invalid: 2 (lowest, highest) or 3 (and middle).")
        for name in ("samples_per_task", "batches_per_task", "repeats"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SweepConfigError(f"{name}={value!r} is invalid: a whole number, at least 1 "
                                       f"(--{name.replace('_', '-')}).")
        self.modes = [mode.strip() for mode in (self.modes.split(",") if isinstance(self.modes, str) else self.modes)]
        unknown = [mode for mode in self.modes if mode not in MODES]
        if unknown or "sweep" not in self.modes:
            raise SweepConfigError(f"modes={','.join(self.modes)} is invalid: sweep, and any of {', '.join(MODES)} "
                                   "(--modes).")

    @classmethod
    def overrides(cls, args: argparse.Namespace) -> dict:
        return dict(super().overrides(args), preset=args.preset, samples_per_task=args.samples_per_task,
                    batches_per_task=args.batches_per_task, repeats=args.repeats, timed_ratios=args.timed_ratios,
                    modes=args.modes)


def _check_checkpoint(name: str, trust_remote_code: bool) -> None:
    """A model that is not a readable checkpoint of a supported family stops the estimate here."""
    from ..sweep.source import Checkpoints

    try:
        Checkpoints().family(name, trust_remote_code)
    except ValueError as error:
        raise SweepConfigError(str(error)) from None


def add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    """The sweep's options, and the estimate's own."""
    add_sweep_arguments(parser)
    parser.epilog = ("With no option at all, prices the sweep `kvprune sweep` runs with none: the embedded demo model on "
                     "its suite. Prices the runs the same sweep options would make (default --out: "
                     "kvprune-results/estimate): estimate.csv and estimate.md per task and in total.")
    add = parser.add_argument
    add("--samples-per-task", type=int, help="samples timed one at a time per task, lengths spread over the task's "
        "(default: 2)")
    add("--batches-per-task", type=int, help="scoring batches of --batch-size timed per task, with the sweep's batching "
        "and sharing: its first and last, and others spread between (default: 2)")
    add("--repeats", type=int, help="times each timed batch or sample runs; each figure is the median, with the "
        "fastest and slowest beside it (default: 3)")
    add("--timed-ratios", type=int, choices=(2, 3), help="ratios timed per method: 2 (its lowest and highest) or 3 "
        "(and its middle); the others are interpolated (default: 3)")
    add("--modes", help=f"ways to price, comma-separated: sweep and any of {', '.join(MODES)} (default: all)")
