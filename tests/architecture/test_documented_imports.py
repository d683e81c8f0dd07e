"""docs/architecture.md's table "Arrows between areas" is the import graph between areas, read from the
code (``test_imports``' edges): every arrow it lists exists, and every arrow that exists is listed.

An area is a folder of the harness or the core (``harness/sweep/``, ``kvprune/engine/``, ``presses/``,
``harness/tasks/benchmarks/`` apart from the rest of ``harness/tasks/``) or a module directly under
``harness/`` or ``kvprune/`` (``harness/audio.py``, ``kvprune/press.py``, ``kvprune/__init__.py``)."""

from __future__ import annotations

import re

from tests.architecture.test_imports import _edges
from tests.support.paths import REPO

TABLE = "## Arrows between areas"
ROW = re.compile(r"^\| `([^`]+)` \| (.*) \|$")


def area(module: str) -> str:
    """The area of an installed module name (``kvprune.harness.sweep.runner`` -> ``harness/sweep/``)."""
    parts = module.split(".")
    if parts[:2] == ["kvprune", "presses"]:
        return "presses/"
    root, rest = ("harness", parts[2:]) if parts[:2] == ["kvprune", "harness"] else ("kvprune", parts[1:])
    if not rest:
        return f"{root}/__init__.py"
    if rest[:2] == ["tasks", "benchmarks"]:
        return "harness/tasks/benchmarks/"
    package = (REPO / root / rest[0]).is_dir()
    return f"{root}/{rest[0]}/" if package else f"{root}/{rest[0]}.py"


def code_arrows() -> dict[str, set[str]]:
    arrows: dict[str, set[str]] = {}
    for edge in _edges():
        importer, imported = area(edge.importer), area(edge.imported)
        if importer != imported:
            arrows.setdefault(importer, set()).add(imported)
    return arrows


def documented_arrows() -> dict[str, set[str]]:
    text = (REPO / "docs" / "architecture.md").read_text()
    assert TABLE in text, f'docs/architecture.md has no section "{TABLE}"'
    section = text.split(TABLE, 1)[1].split("\n## ", 1)[0]
    arrows = {}
    for line in section.splitlines():
        match = ROW.match(line.strip())
        if match:
            arrows[match[1]] = set(re.findall(r"`([^`]+)`", match[2]))
    return arrows


def test_the_areas_are_read_from_the_code():
    """A guard: arrows that certainly exist are found, under the names the table uses."""
    arrows = code_arrows()
    assert "kvprune/press.py" in arrows["presses/"]
    assert "harness/setup/" in arrows["harness/sweep/"]
    assert "kvprune/engine/" in arrows["kvprune/generation/"]


def test_the_documented_arrows_are_the_imports_between_areas():
    documented, code = documented_arrows(), code_arrows()
    missing = [f"{a} -> {b}" for a in sorted(code) for b in sorted(code[a] - documented.get(a, set()))]
    stale = [f"{a} -> {b}" for a in sorted(documented) for b in sorted(documented[a] - code.get(a, set()))]
    assert not missing, ('the code has arrows docs/architecture.md\'s "Arrows between areas" does not list (add them, '
                         "or remove the import):\n  " + "\n  ".join(missing))
    assert not stale, ('docs/architecture.md\'s "Arrows between areas" lists arrows the code does not have '
                       "(remove them):\n  " + "\n  ".join(stale))
