"""The path of one ratio, from ``kvprune sweep --ratios`` to a press's ``select``, in at most 10 files,
each entered once (docs/architecture.md, "The path of one ratio").

Followed as the program runs, not as the code reads: a demo sweep of one sample at a ratio no other value
has, with a profiler that records every call of the repository's code that is handed the ratio (as the
text of ``--ratios``, the float, or a list of them) or is a method of what holds it as ``ratio`` (a
planned run, a press), up to the first call of a press's ``select``. A file the ratio merely passes
through inside an object it does not hold (the engine carries the press, not its ratio) is not on it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.support.paths import REPO

RATIO, TEXT = 0.37, "0.37"
LIMIT = 10


def _holds(value, depth: int = 0) -> bool:
    if isinstance(value, float):
        return value == RATIO
    if isinstance(value, str):
        return value == TEXT
    return depth == 0 and isinstance(value, (list, tuple)) and any(_holds(v, 1) for v in value[:64])


def _fields(instance) -> dict:
    """An instance's own fields, read without running any of its code (a property, ``__getattr__``)."""
    try:
        return object.__getattribute__(instance, "__dict__")
    except Exception:  # noqa: BLE001  (no __dict__, or one that cannot be read yet)
        return {}


def ratio_path(argv: list[str]) -> list[tuple[str, str]]:
    """(file, function) of every call on the ratio's path, in the order they ran, up to the first ``select``."""
    calls: list[tuple[str, str]] = []
    root = str(REPO) + "/"

    def profile(frame, event, arg):
        if event != "call" or calls and calls[-1][1].endswith(".select"):
            return
        code = frame.f_code
        path = code.co_filename
        if not path.startswith(root) or "/tests/" in path[len(root) - 1:] or "/.venv/" in path:
            return
        arguments = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        local = frame.f_locals
        held = _fields(local.get("self")).get("ratio") if arguments[:1] == ("self",) else None
        if any(_holds(local.get(name)) for name in arguments) or _holds(held):
            calls.append((str(Path(path).relative_to(REPO)), code.co_qualname))

    from kvprune.harness.cli import main

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        assert main(argv) == 0
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return calls


@pytest.mark.usefixtures("one_thread")
def test_the_ratio_reaches_select_through_at_most_ten_files_each_entered_once(tmp_path):
    calls = ratio_path(["sweep", "--tasks", "demo_pitch", "--limit", "1", "--methods", "fastv", "--ratios", TEXT,
                        "--timing-samples", "0", "--out", str(tmp_path), "--quiet", "--no-plots"])
    trace = "\n  ".join(f"{file}: {function}" for file, function in calls)
    assert calls and calls[-1] == ("presses/fastv.py", "FastVPress.select"), f"the ratio never reached select:\n  {trace}"
    files = list(dict.fromkeys(file for file, _ in calls))
    assert files[0] == "harness/cli.py" and "kvprune/specs.py" in files, trace  # the guard: the whole way is seen
    assert len(files) <= LIMIT, f"the ratio passes through {len(files)} files on its way to select:\n  {trace}"
    entered = [file for index, (file, _) in enumerate(calls) if index == 0 or calls[index - 1][0] != file]
    again = sorted({file for file in entered if entered.count(file) > 1})
    assert not again, f"the ratio enters {again} again on its way to select:\n  {trace}"
