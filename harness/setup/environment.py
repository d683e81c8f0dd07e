"""What ran where, recorded with every sweep run (``runs.jsonl``) and every bench row (``bench.csv``):
the device's name, the versions that matter to the numbers, and when; and how fast the host was at a moment
(``host_loop_ns``: launch-bound times follow it)."""

from __future__ import annotations

import math
import platform
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import torch
import transformers

import kvprune

from .device import device_name


@dataclass(frozen=True)
class Environment:
    card: str  # the GPU's name, else the processor
    versions: dict[str, str]  # kvprune, torch, transformers, python
    time: str  # UTC, to the second


def now() -> str:
    """The time of a record: UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def host_loop_ns(iterations: int = 20_000, repeats: int = 3) -> float:
    """Nanoseconds per iteration of a fixed pure-Python loop (the fastest of ``repeats``, ~1 ms each): the host's
    speed at this moment, which launches and Python dispatch follow."""
    best = math.inf
    for _ in range(repeats):
        start, total = time.perf_counter(), 0
        for i in range(iterations):
            total += i
        best = min(best, time.perf_counter() - start)
    return 1e9 * best / iterations


def environment(device: str | torch.device | None) -> Environment:
    """Where a command runs now (``device``: None when the model was placed by a device map)."""
    versions = dict(kvprune=kvprune.__version__, torch=torch.__version__, transformers=transformers.__version__,
                    python=platform.python_version())
    return Environment(card=device_name(device), versions=versions, time=now())
