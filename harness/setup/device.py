"""The device a command runs on: checked before anything is loaded, the KV cache decoding gets on it,
its name for the records, its memory released after a failure, and the CPU threads a small model gets."""

from __future__ import annotations

import gc
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .options import CACHES


def default_device() -> str:
    """Where a command runs when ``--device`` is not given: the GPU if there is one."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str | None) -> None:
    """Refuse a ``--device`` that torch cannot read or this machine does not have, before a model is
    loaded (torch would say so only when the first tensor moves there, after minutes of loading)."""
    if device is None:
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device {device!r} is not a device: give e.g. cpu, cuda or cuda:1.") from None
    if parsed.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {device}: this machine has no CUDA device (torch {torch.__version__} built without CUDA "
            "or no GPU visible); use --device cpu."
        )
    count = torch.cuda.device_count()
    if parsed.index is not None and parsed.index >= count:
        raise ValueError(
            f"--device {device}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}; give one of them."
        )


def resolve_cache(choice: str, device) -> str:
    """How ``--decoding`` decodes on ``device``: "engine", "static" or "dynamic" (auto: the engine, which
    falls back to stock generate, and says so, for a model it cannot decode)."""
    if choice not in CACHES:
        raise ValueError(f"cache={choice!r} is invalid: choose one of {', '.join(CACHES)}.")
    return "engine" if choice == "auto" else choice


def device_name(device: str | torch.device | None) -> str:
    """The card a command runs on (None: wherever the model was placed), else the processor."""
    if torch.cuda.is_available() and (device is None or str(device).startswith("cuda")):
        return torch.cuda.get_device_name(torch.device(device or "cuda"))
    return platform.processor() or platform.machine()


def release_memory() -> None:
    """Give back what a failed run held (after running out of memory, so that the next run has it)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


#: below this many parameters, a model on the CPU runs on one thread (``cpu_threads``)
SMALL_MODEL_PARAMETERS = 100_000_000
#: what a user sets to choose torch's CPU threads; a command leaves the threads to them
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextmanager
def cpu_threads(model: torch.nn.Module) -> Iterator[int]:
    """Run a small model on the CPU on one torch thread for the duration of the block, and yield the
    thread count in force. A model this small (the demo's 1.2 M parameters) multiplies matrices too
    small for threads to pay, and its threads wait on each other whenever another process takes a
    core: on 2 cores beside one busy process, the demo's 40 generations took 14.9 s on one thread
    and 161 s on two (README, "CPU threads"; ``scripts/cpu_threads.py``). Larger models, models on a
    GPU, and a user who set ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` keep torch's threads."""
    before = torch.get_num_threads()
    first = next(model.parameters(), None)
    small = sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMETERS
    chosen = any(os.environ.get(name) for name in THREAD_VARIABLES)
    if first is not None and first.device.type == "cpu" and small and not chosen:
        torch.set_num_threads(1)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
