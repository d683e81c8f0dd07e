"""``kvprune estimate``'s configuration: a sweep's (the same file and options), plus what the
estimate itself needs: a bench preset instead of a checkpoint, and how much to time."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..sweep.config import SweepConfig, SweepConfigError, add_sweep_arguments

DESCRIPTION = ("what a sweep will cost on this device, before its first sample: GPU-hours per task at batch 1, "
               "with the sweep's batching and sharing, and AudioMarathon's way")


@dataclass
class EstimateConfig(SweepConfig):
    preset: str | None = None  # a bench preset (the real architecture, random weights) instead of --model
    samples_per_task: int = 2  # prompts timed one at a time per task (batch 1, AudioMarathon's way)
    batches_per_task: int = 1  # batches of --batch-size prompts timed per task with the sweep's settings
    decode_tokens: int = 8  # tokens decoded in each timed call (the per-step time prices the task's answer length)
    timed_ratios: int = 3  # ratios timed per method: its lowest, (middle,) highest; the others interpolated

    def check_inputs(self) -> None:
        """A model or a preset, tasks, and a data folder only if one is named (else published sizes)."""
        if bool(self.models) == bool(self.preset):
            raise SweepConfigError(
                "give either --model (a checkpoint: its tasks' data is used where present) or --preset (a bench preset: "
                "the real architecture with random weights, no download; see `kvprune bench --help`), not "
                f"{'both' if self.models else 'neither'}."
            )
        if self.preset is not None:
            from ..bench.presets import PRESETS

            if self.preset not in PRESETS:
                raise SweepConfigError(f"unknown preset {self.preset!r}; the presets are {', '.join(PRESETS.names())}.")
        if not self.tasks:
            raise SweepConfigError("no task given: pass --tasks (see `kvprune tasks`; a suite such as audiomarathon).")
        if self.data_root is not None and not Path(self.data_root).is_dir():
            raise SweepConfigError(f"data root {self.data_root} is not a directory: pass --data-root DIR, or leave it "
                                   "out to price the tasks by their published sizes.")
        if self.timed_ratios not in (2, 3):
            raise SweepConfigError(f"timed_ratios={self.timed_ratios!r} is invalid: 2 (lowest, highest) or 3 (and middle).")
        for name in ("samples_per_task", "batches_per_task", "decode_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (2 if name == "decode_tokens" else 1):
                raise SweepConfigError(f"{name}={value!r} is invalid: a whole number, at least "
                                       f"{2 if name == 'decode_tokens' else 1} (--{name.replace('_', '-')}).")

    @classmethod
    def overrides(cls, args: argparse.Namespace) -> dict:
        return dict(super().overrides(args), preset=args.preset, samples_per_task=args.samples_per_task,
                    batches_per_task=args.batches_per_task, decode_tokens=args.decode_tokens, timed_ratios=args.timed_ratios)


def add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    """The sweep's options, and the estimate's own."""
    add_sweep_arguments(parser)
    parser.epilog = ("Prices the runs the same sweep options would make (default --out: kvprune-results/estimate): "
                     "estimate.csv and estimate.md per task and in total.")
    add = parser.add_argument
    add("--preset", help="a bench preset instead of --model: the real architecture with random weights, no download "
        "(e.g. qwen2.5-omni-7b; see `kvprune bench --help`)")
    add("--samples-per-task", type=int, help="prompts timed one at a time per task, lengths spread over the task's "
        "(default: 2)")
    add("--batches-per-task", type=int, help="batches of --batch-size prompts timed per task with the sweep's "
        "batching and sharing (default: 1)")
    add("--timed-ratios", type=int, choices=(2, 3), help="ratios timed per method: 2 (its lowest and highest) or 3 "
        "(and its middle); the others are interpolated (default: 3)")
    add("--decode-tokens", type=int, help="tokens decoded in each timed call; the measured step time prices each "
        "task's own answer length (default: 8)")
