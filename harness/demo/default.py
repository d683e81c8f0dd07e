"""The embedded default of ``kvprune sweep``: the demo model on its held-out synthetic suite.

Everything it needs is shipped or generated here (the suite is regenerated from its seed and checked
against the shipped hashes), so the first command a new user runs needs no download.
"""

from __future__ import annotations

from pathlib import Path

from ..setup.options import name_list
from . import DEMO
from .suite import demo_suite
from .synthetic import TASKS

DEMO_TASKS = [f"demo_{task}" for task in TASKS]
DEMO_OUT = Path("kvprune-results") / "demo"


def asks_for_demo(models) -> bool:
    """Whether a sweep's models (None: not given, on the command line or in its file; a comma-separated
    string; a list) are the demo's alone: then the demo's tasks, data and folder fill what is unset."""
    return models is None or name_list(models) == [DEMO]


def prepare_default(overrides: dict) -> dict:
    """Fill what the user left unset with the demo's model, tasks, data and output folder, and its prefill's layers
    as written: compiling them on a GPU costs ~17 s that the demo's minute-long sweep never wins back (H100,
    2026-12-06: 97 s against 84 s)."""
    filled = dict(overrides, models=[DEMO])
    for name, value in (("tasks", DEMO_TASKS), ("out", DEMO_OUT), ("compile_prefill", False)):
        if filled.get(name) is None:
            filled[name] = value
    if filled.get("data_root") is None:
        filled["data_root"] = demo_suite()
    return filled


def runs_demo_suite(given: dict, config) -> bool:
    """Whether a sweep filled by ``prepare_default`` runs the demo's own suite: its data (no data folder
    ``given``) and none but its tasks."""
    return given.get("data_root") is None and set(config.tasks) <= set(DEMO_TASKS)
