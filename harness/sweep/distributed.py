"""A sweep under ``accelerate launch``: which process this is, and waiting for the others. A single
process (no launcher) is rank 0 of 1, and nothing here waits."""

from __future__ import annotations

import os

import torch


def process_share() -> tuple[int, int, str | None]:
    """(rank, world size, device) under ``accelerate launch``; (0, 1, None) otherwise."""
    try:
        from accelerate import PartialState
    except ImportError:  # accelerate is a dependency, but keep single-process runs independent of it
        return 0, 1, None
    # accelerate starts a process group on a host without GPUs only when told to use the CPU
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    state = PartialState(cpu=launched and not torch.cuda.is_available())
    if state.num_processes == 1:
        return 0, 1, None
    return state.process_index, state.num_processes, str(state.device)


def barrier() -> None:
    """Wait for every process of an ``accelerate launch`` (a no-op in a single process)."""
    try:
        from accelerate import PartialState
    except ImportError:
        return
    PartialState().wait_for_everyone()


def finish() -> None:
    """Wait for every process, then end the process group: nothing is exchanged after this."""
    barrier()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
