"""Writing into a results folder, the one error every failed write becomes, and the warning for a
line that cannot be read back.

A write that fails (a full disk, a read-only or unwritable folder) raises ``SweepOutputError``: its
message names the file and the reason, says what is kept and how to go on. ``kvprune`` ends with it
and exit status 3 (docs: the CLI's exit statuses). Result lines are written by ``write_line`` in one
unbuffered write each, so that nothing is left in a buffer for a later close to fail on again; what
a failed write may leave (the start of a line) is dropped when the file is next appended to.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

RESUME = "free the space or fix the permissions, then rerun the same command to resume"


class ResultsFileWarning(UserWarning):
    """A line of a results or runs file could not be read; the rest was."""


class SweepOutputError(OSError):
    """A file of a results folder could not be written: the message says which, why, what is kept
    and how to go on."""


def cannot_write(path: Path, error: OSError, kept: str, then: str = RESUME) -> SweepOutputError:
    """The error for a failed write of ``path``: the reason, what is kept, what to do."""
    return SweepOutputError(f"cannot write {path} ({error.strerror or error}); {kept}: {then}.")


def write_line(handle, line: str) -> None:
    """Write one whole line to a file opened unbuffered in binary mode (``open(path, "ab",
    buffering=0)``), retrying the rest after a short write."""
    view = memoryview(line.encode("utf-8"))
    while view:
        view = view[handle.write(view):]


def write_json(path: Path, value, kept: str = "the folder's results are kept") -> None:
    """Write ``value`` to ``path`` whole or not at all (a temporary file, then a rename)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps(value, indent=1, default=str), encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise cannot_write(path, error, kept) from None
