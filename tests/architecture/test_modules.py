"""Modules small enough to read at once, and family declarations free of the harness's words."""

from __future__ import annotations

import re

from tests.support.paths import REPO

MAX_LINES = 400
PACKAGES = ["kvprune", "presses", "harness"]


def test_no_module_is_over_400_lines():
    sizes = {path: len(path.read_text().splitlines()) for package in PACKAGES for path in (REPO / package).rglob("*.py")}
    assert len(sizes) > 100, "the modules were found"
    too_long = sorted(f"{path.relative_to(REPO)}: {n} lines" for path, n in sizes.items() if n > MAX_LINES)
    assert not too_long, f"modules over {MAX_LINES} lines (split them by concern):\n  " + "\n  ".join(too_long)


def test_family_declarations_say_nothing_of_the_bench():
    """Bench shapes and presets are the harness's (harness/bench/shapes.py), not the family's."""
    mentions = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted((REPO / "kvprune" / "models").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search("bench", line, re.IGNORECASE)
    ]
    assert not mentions, "kvprune/models/ names the bench:\n  " + "\n  ".join(mentions)
