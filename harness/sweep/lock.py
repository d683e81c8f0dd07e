"""One writer per results folder: a lock file per process (one per rank under ``accelerate launch``).

A sweep holds ``.kvprune.rank<N>.lock`` in its folder while it runs: an exclusive ``flock`` on it,
which the operating system drops when the process dies, however it dies, and a line saying who
holds it (pid, host, start time, world size), for the message a second sweep gets. A lock file
whose flock nobody holds was left by a killed sweep: it is taken over. Processes of one launch hold
one lock each; a sweep of another world size running at the same time is refused too, since its
processes would write other files of the same folder. Where ``fcntl`` is missing (Windows), whether
the recorded pid still runs decides instead.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path

from .disk import cannot_write

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

PATTERN = ".kvprune.rank*.lock"


class FolderLockedError(RuntimeError):
    """Another sweep is writing to the same results folder."""


class FolderLock:
    def __init__(self, out_dir: Path, rank: int = 0, world_size: int = 1):
        self.out_dir = Path(out_dir)
        self.rank, self.world_size = rank, world_size
        self.path = self.out_dir / f".kvprune.rank{rank}.lock"
        self.taken_over: dict | None = None  # what a killed sweep had left in the lock file
        self._handle = None

    def acquire(self) -> None:
        """Hold the lock, or raise ``FolderLockedError`` naming the sweep that holds it."""
        while True:
            handle = open(self.path, "a+", encoding="utf-8")
            if _try_lock(handle, self.path) and _same_file(handle, self.path):
                break
            handle.close()
            if self.path.exists() and _held(self.path):
                raise FolderLockedError(self._refusal(_holder(self.path)))
            # else: locked a file its holder had just removed on exit; open the new one
        try:
            previous = _holder(self.path)
            if previous:
                self.taken_over = previous
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(_me(self.rank, self.world_size)) + "\n")
            handle.flush()
        except BaseException as error:
            self._handle = handle
            self.release()
            if isinstance(error, OSError):  # a full disk: the lock file is gone again, the folder as it was
                raise cannot_write(self.path, error, "nothing ran", "free the space or fix the permissions, then "
                                   "rerun the command") from None
            raise
        self._handle = handle
        try:
            self._refuse_other_launches()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        self.path.unlink(missing_ok=True)
        try:
            handle.close()  # closing drops the flock
        except OSError:  # a write that failed left data in the buffer: the file is gone and the flock with it
            pass

    def __enter__(self) -> "FolderLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _refuse_other_launches(self) -> None:
        """Live locks of another world size belong to another sweep on this folder."""
        for path in self.out_dir.glob(PATTERN):
            if path == self.path:
                continue
            holder = _holder(path)
            if holder and holder.get("world_size") != self.world_size and _held(path):
                raise FolderLockedError(self._refusal(holder))

    def _refusal(self, holder: dict | None) -> str:
        who = (f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
               if holder else "a process that has not said who it is yet")
        return (
            f"another sweep is writing to {self.out_dir} ({who}): two sweeps in one folder would run and record "
            "the same samples twice. Wait for it to finish (rerunning the same command then resumes whatever it "
            "left), or give this sweep another --out."
        )


def _me(rank: int, world_size: int) -> dict:
    return dict(
        pid=os.getpid(), host=socket.gethostname(), rank=rank, world_size=world_size,
        started=datetime.now(timezone.utc).isoformat(timespec="seconds"), command=" ".join(sys.argv),
        python=platform.python_version(),
    )


def _holder(path: Path) -> dict | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None


def _try_lock(handle, path: Path) -> bool:
    if fcntl is not None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
    holder = _holder(path)
    return not (holder and holder.get("host") == socket.gethostname() and _alive(holder.get("pid")))


def _same_file(handle, path: Path) -> bool:
    """Whether ``handle`` is still the file at ``path`` (a holder removes it when it exits)."""
    try:
        return os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _held(path: Path) -> bool:
    """Whether a live process holds the lock file at ``path`` (probed without keeping it)."""
    if fcntl is None:
        holder = _holder(path)
        return bool(holder and _alive(holder.get("pid")))
    try:
        with open(path, "a", encoding="utf-8") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True
