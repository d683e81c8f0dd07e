"""What every use of ``torch.compile`` in kvprune shares: room for its recompilations, telling the
compiler's own failures (which a caller survives by running uncompiled) from the computation's, and
keeping the compiler's report of such a failure out of the logs (the caller reports it in one line);
and the warm-up on a side stream that every CUDA graph capture of compiled code follows."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from contextlib import contextmanager

import torch

RECOMPILE_LIMIT = 64  # compilations per compiled function (torch's default, 8, falls back to eager without a word)
COMPILER_LOGGERS = ("torch._guards", "torch._dynamo", "torch._inductor", "torch.fx")


def warm_up_on_side_stream(run) -> None:
    """``run()`` once on a stream of its own, ordered after and before the current stream's work: what torch
    asks before a CUDA graph capture (compilation, autotuning and lazy set-up then happen outside it)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)


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


def compiled_or_plain(compiled: Callable, plain: Callable, failed: Callable[[str], None], *args, **kwargs):
    """``compiled(*args, **kwargs)``; where the compiler fails instead, ``failed(its reason in one line)``, then
    ``plain(*args, **kwargs)`` (the computation's own errors, running out of memory among them, propagate)."""
    try:
        return compiled(*args, **kwargs)
    except Exception as error:
        if not from_compiler(error):
            raise
        failed(reason(error))
        return plain(*args, **kwargs)


#: how the compiler's own advice begins, the last line of its errors (the cause is the line before)
COMPILER_ADVICE = ("Set TORCHDYNAMO_VERBOSE", "For even more developer context")


def reason(error: Exception) -> str:
    """An error in one line: its type and its last line but the compiler's advice (there the compiler puts the cause)."""
    text = [line for line in str(error).strip().splitlines() if line.strip() and not line.startswith(COMPILER_ADVICE)]
    return f"{type(error).__name__}: {text[-1] if text else ''}"[:300]


@contextmanager
def recompile_room(limit: int = RECOMPILE_LIMIT):
    """At least ``limit`` compilations per compiled function while the block runs."""
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"  # its older name
    with dynamo_config.patch(**{name: max(limit, getattr(dynamo_config, name))}):
        yield


class _CompilerFailures(logging.Filter):
    """Drops the compiler's warnings and errors: what it logs of a failure the caller reports itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING or not record.name.startswith(COMPILER_LOGGERS)


_COMPILER_LOGGERS: tuple[int, list[logging.Logger]] = (-1, [])  # (loggers known when found, the compiler's among them)


def _compiler_loggers() -> list[logging.Logger]:
    """The root logger, torch's and the compiler's: scanned again only once new loggers exist (a scan of
    every logger costs ~0.1 ms, and an encoder enters the block once per layer)."""
    global _COMPILER_LOGGERS
    known = len(logging.Logger.manager.loggerDict)
    if _COMPILER_LOGGERS[0] != known:
        names = [name for name in list(logging.Logger.manager.loggerDict) if name == "torch" or name.startswith(COMPILER_LOGGERS)]
        _COMPILER_LOGGERS = (known, [logging.getLogger(), *map(logging.getLogger, names)])
    return _COMPILER_LOGGERS[1]


@contextmanager
def compiler_failures_unlogged():
    """torch's compiler logs a failure (a guard it cannot build: 66-132 lines of traceback) before raising it;
    the caller reports the failure in one line (the decode step's ``fallbacks``, an encoder piece's warning),
    so inside the block those records reach no handler (the filter sits on the handlers: the compiler's
    modules, and their loggers, are imported while it compiles). Debug and info records (``TORCH_LOGS``) pass."""
    dropped = _CompilerFailures()
    handlers = {handler for logger in _compiler_loggers() for handler in logger.handlers} | {logging.lastResort} - {None}
    for handler in handlers:
        handler.addFilter(dropped)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(dropped)
