"""A sweep's results folder from its start to its end.

``with ResultsFolder(out, rank, world_size) as folder:`` creates the folder if needed and takes its
lock (``lock``: one writer per folder). ``check(plan)`` refuses a folder whose results were made with
other settings (or, with ``--overwrite``, clears them); ``record(plan, digests)`` writes the plan
once, before the first result. Leaving releases the lock, and a start that failed before recording
its plan removes the folder it created, so the folder is as it was found.
"""

from __future__ import annotations

import os
from pathlib import Path

from .config import SweepConfigError
from .identity import AudioDigests, SweepPlan, read_plan, write_plan
from .lock import FolderLock
from .store import clear_outputs, results_files


class ResultsFolder:
    def __init__(self, out: Path, rank: int = 0, world_size: int = 1):
        self.out, self.rank = out, rank
        self.lock = FolderLock(out, rank, world_size)
        self.notes: list[str] = []  # what the user should know about this start (printed by the CLI)
        self.recorded = False  # whether this start has written its plan
        self._created = False

    def __enter__(self) -> ResultsFolder:
        self._created = _make_folder(self.out)
        try:
            self.lock.acquire()
        except BaseException:
            self._remove_if_empty()
            raise
        held = self.lock.taken_over
        if held:
            self.notes.append(f"took over the lock left by a sweep that no longer runs (pid {held.get('pid')}, "
                              f"started {held.get('started')}); its results so far are kept.")
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()
        if not self.recorded:
            self._remove_if_empty()

    def check(self, plan: SweepPlan, overwrite: bool = False) -> None:
        """Refuse to mix results of other settings into the folder (or clear it, with ``overwrite``)."""
        out = self.out
        recorded = read_plan(out)
        has_results = bool(results_files(out))
        if overwrite:
            if self.rank == 0 and (has_results or recorded):
                removed = clear_outputs(out)
                self.notes.append(f"--overwrite: removed {len(removed)} files of the earlier results in {out}.")
            return
        if recorded is None:
            if has_results:
                raise SweepConfigError(
                    f"{out} holds results without a record of the configuration that made them (plan.json; written "
                    "by kvprune since runs were identified by everything that determines their outputs), so they "
                    f"cannot be checked against this one. Give another --out, or rerun with --overwrite to discard them."
                )
            return
        differences = plan.differences(recorded)
        if differences:
            raise SweepConfigError(
                f"{out} holds results made with other settings, which this sweep would mix with its own:\n  - "
                + "\n  - ".join(differences)
                + "\nGive another --out for this configuration, or rerun with --overwrite to discard the earlier results."
            )
        changed = plan.changed_samples(recorded)
        if changed:
            self.notes.append(f"{changed} sample(s) changed since the last sweep in this folder (audio or prompt): "
                              "they run again; their earlier results are no longer summarised.")

    def record(self, plan: SweepPlan, digests: AudioDigests) -> None:
        """Record what this configuration asks for (once, before its first result)."""
        if self.recorded:
            return
        if self.rank == 0:
            write_plan(self.out, plan)
        digests.save()
        self.recorded = True

    def _remove_if_empty(self) -> None:
        """Leave no trace of a start that failed: remove the folder it created, if nothing is in it."""
        if self._created:
            try:
                self.out.rmdir()
            except OSError:
                pass


def _make_folder(out: Path) -> bool:
    """Create the results folder if needed (True if it was created); an error that says so if it
    cannot be written."""
    existed = out.is_dir()
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".kvprune-write-test.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise SweepConfigError(
            f"cannot write results to {out} ({error.strerror or error}): give a folder you can write to with --out."
        ) from None
    return not existed
