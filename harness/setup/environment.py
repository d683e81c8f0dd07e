"""What ran where, recorded with every sweep run (``runs.jsonl``) and every bench row (``bench.csv``):
the device's name, the versions that matter to the numbers, and when."""

from __future__ import annotations

import platform
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


def environment(device: str | torch.device | None) -> Environment:
    """Where a command runs now (``device``: None when the model was placed by a device map)."""
    versions = dict(kvprune=kvprune.__version__, torch=torch.__version__, transformers=transformers.__version__,
                    python=platform.python_version())
    return Environment(card=device_name(device), versions=versions, time=now())
