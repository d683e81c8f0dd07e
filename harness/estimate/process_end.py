"""What a sweep's process pays to end, after its last output is written: shutting down the compiler's
workers, freeing the device's memory, the CUDA graphs and the context, unloading the libraries. On an
H100 at the 7B shape that is ~6 s (against ~1.2 s on a CPU): the largest part of a small sweep's fixed
costs that nothing inside the process can time. ``kvprune estimate`` therefore does its work in a child
process, which holds what a sweep holds (the model, compiled steps, graphs, decode states), and times
that child's end from outside: from the moment its work ended (written to a file) to its exit."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENDED = "KVPRUNE_ESTIMATE_ENDED"  # in the child's environment: the file it writes the moment its work ends


def in_child() -> bool:
    """Whether this process is the one doing the estimate's work (its parent times its end)."""
    return ENDED in os.environ


def mark_ended() -> None:
    """Write the moment this process's work ended, for the parent that times its end."""
    path = os.environ.get(ENDED)
    if path:
        Path(path).write_text(repr(time.time()))


def run_timing_the_end(argv: list[str]) -> tuple[int, float | None]:
    """Run ``kvprune <argv>`` in a child process: its exit status, and the seconds from the end of its
    work to its exit (None where it never said its work ended: it failed or was interrupted)."""
    with tempfile.TemporaryDirectory(prefix="kvprune-estimate-end-") as folder:
        mark = Path(folder) / "ended"
        command = [sys.executable, "-m", "kvprune.harness.cli", *argv]
        child = subprocess.Popen(command, env=dict(os.environ, **{ENDED: str(mark)}))
        try:
            status = child.wait()
        except KeyboardInterrupt:  # the child got the same interrupt: it stops on its own (never killed mid-write)
            child.wait()
            return 130, None
        exited = time.time()
        ended = float(mark.read_text()) if mark.exists() else None
    return status, None if ended is None else max(0.0, exited - ended)
