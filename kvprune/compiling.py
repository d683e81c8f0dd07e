"""What every use of ``torch.compile`` in kvprune shares: room for its recompilations, and telling the
compiler's own failures (which a caller survives by running uncompiled) from the computation's."""

from __future__ import annotations

import traceback
from contextlib import contextmanager

import torch

RECOMPILE_LIMIT = 64  # compilations per compiled function (torch's default, 8, falls back to eager without a word)


def out_of_memory(error: BaseException | None) -> bool:
    """Whether ``error`` is, or was caused by, the device running out of memory (the compiler wraps it)."""
    while error is not None:
        if isinstance(error, torch.OutOfMemoryError):
            return True
        error = error.__cause__ or error.__context__
    return False


def from_compiler(error: Exception) -> bool:
    """Whether ``error`` was raised inside torch.compile's machinery (dynamo, inductor), not by the
    compiled function's own computation (running out of memory is neither: the caller makes room)."""
    if out_of_memory(error):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    return any("torch/_dynamo" in frame.filename or "torch/_inductor" in frame.filename for frame in frames)


def reason(error: Exception) -> str:
    """An error in one line: its type and its last line (where the compiler puts the cause)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1] if text else ''}"[:300]


@contextmanager
def recompile_room(limit: int = RECOMPILE_LIMIT):
    """At least ``limit`` compilations per compiled function while the block runs."""
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"  # its older name
    with dynamo_config.patch(**{name: max(limit, getattr(dynamo_config, name))}):
        yield
