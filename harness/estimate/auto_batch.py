"""``kvprune sweep --batch-size auto``: the batch size the estimate says is cheapest on this device.

Before the sweep, ``kvprune estimate`` prices its scoring pass (as cheaply as it can: one batch per
task, once, the lowest and highest ratio of each method; the timing subset, the same at any size, left
out, and so are each run's first calls, whose lazy set-up any size pays) at each candidate
size (``CANDIDATES``, the largest task's sample count in place of those beyond it), on the model the sweep then runs. What
the choice rests on is said (printed, in runs.jsonl and in report.md): at small sizes the fixed
costs (a compilation per batch size, the timing subset) can outweigh what batching saves, and the
choice is batch 1; at real shapes batched decoding usually wins. The choice itself takes time,
which it says too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .report_rows import FIXED, TOTAL

CANDIDATES = (1, 8, 32)
QUICK = dict(modes=["sweep"], repeats=1, batches_per_task=1, samples_per_task=1, timed_ratios=2)


@dataclass(frozen=True)
class BatchChoice:
    size: int
    reason: str


def choose_batch_size(config, progress: bool = False) -> BatchChoice:
    """The cheapest of ``CANDIDATES`` for ``config`` (a ``SweepConfig`` or ``DryRunConfig`` whose
    ``batch_size`` is "auto"), by the estimate's total for the sweep at each."""
    from ..bench.presets import PRESETS
    from .config import EstimateConfig
    from .estimate import run_estimate
    from .synthetic import SyntheticPrompts

    start = time.perf_counter()
    settings = {name: value for name, value in vars(config).items() if name in EstimateConfig.__dataclass_fields__}
    if settings.get("preset"):
        settings["models"] = []
    priced: dict[int, float] = {}
    candidates, loaded = list(CANDIDATES), None
    while candidates:
        size = candidates.pop(0)
        estimate = EstimateConfig(**{**settings, **QUICK, "batch_size": size})
        if loaded is None:
            loaded = (SyntheticPrompts(PRESETS.get(estimate.preset)) if estimate.preset else SyntheticPrompts()).load(
                estimate.models[0] if estimate.models else estimate.preset, estimate, estimate.device)
        table = run_estimate(estimate, progress=progress, outputs=False, loaded=loaded, timing_subset=False)
        tasks = table[(table["mode"] == "sweep") & ~table["task"].isin([TOTAL, FIXED])]  # what the size changes
        priced[size] = float((tasks["seconds"] - tasks["lazy_seconds"]).sum())
        largest = int(tasks["samples"].max())  # a larger batch runs the same batches as this one
        candidates = [c for c in dict.fromkeys(min(c, largest) for c in candidates) if c not in priced]
    best = min(priced, key=priced.get)
    seconds = ", ".join(f"batch {size}: {value:.0f} s" for size, value in priced.items())
    reason = (f"--batch-size auto chose {best}: the estimate priced this sweep's scoring passes at {seconds} on this "
              f"device (what every size pays alike, starting, loading, the timing subset and writing the outputs, left "
              f"out; choosing took {time.perf_counter() - start:.0f} s)")
    return BatchChoice(best, reason)
