"""The repository's folders, for tests that read its files (README, scripts, sweep files, official data)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OFFICIAL_DATA = REPO / "tests" / "data" / "official"  # metadata shipped by the benchmarks, for parity tests


def load_script(name: str, monkeypatch=None):
    """``scripts/<name>.py`` imported as a module; with ``monkeypatch``, registered in ``sys.modules``
    for the test (a script whose dataclasses look their module up needs it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, name, script)
    spec.loader.exec_module(script)
    return script
