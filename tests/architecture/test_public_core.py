"""The harness and the presses use the core through its public names only (docs/architecture.md, "The
core's public boundary"): no import of a core module with a leading underscore in its dotted name, no
imported name with one, and no attribute with one read off an imported core module or core name."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

USERS = {"harness": REPO / "harness", "presses": REPO / "presses"}
OWN = ("kvprune.harness", "kvprune.presses")  # installed names of the users themselves


def _core(module: str) -> bool:
    return (module == "kvprune" or module.startswith("kvprune.")) and not any(
        module == own or module.startswith(own + ".") for own in OWN)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(source: str, where: str) -> list[str]:
    """Every use of a private core module or name in ``source`` (a module of the harness or the presses):
    ``file:line what``. Relative imports stay inside the user's own package, so they are not the core's."""
    found, bound = [], {}  # bound: local names of imported core modules and names -> what they are
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _core(alias.name):
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{where}:{node.lineno} imports {alias.name}")
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and _core(node.module):
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{where}:{node.lineno} imports from {node.module}")
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{where}:{node.lineno} imports {node.module}.{alias.name}")
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{where}:{node.lineno} reads {ast.unparse(node)} ({bound[root.id]})")
    return sorted(found, key=lambda use: int(use.split(":")[1].split(" ")[0]))


def test_the_check_sees_private_uses():
    """A guard: each form of reaching past the boundary is caught, and public uses are not."""
    source = (
        "import kvprune.engine._hidden\n"
        "from kvprune._private import x\n"
        "from kvprune.engine.session import _claim\n"
        "from kvprune.generation import decode_attention as fused\n"
        "fused._processors(1)\n"
        "import kvprune\n"
        "kvprune.engine.session._claim\n"
        "from kvprune.press import Press\n"
        "Press.__name__, Press.parts\n"
        "from .sweep import _local\n"
    )
    found = private_uses(source, "example.py")
    assert [line.split(" ", 1)[0] for line in found] == [f"example.py:{n}" for n in (1, 2, 3, 5, 7)], found


def test_the_harness_and_the_presses_use_only_public_core_names():
    found = [use for folder in USERS.values() for path in sorted(folder.rglob("*.py"))
             for use in private_uses(path.read_text(), str(path.relative_to(REPO)))]
    assert not found, ("the core's private modules and names are its own; make what is needed public (no leading "
                       "underscore, documented) or use a public name:\n  " + "\n  ".join(found))


def test_every_user_module_was_read():
    assert any(Path(p).name == "runner.py" for p in USERS["harness"].rglob("*.py"))
    assert any(Path(p).name == "fastv.py" for p in USERS["presses"].rglob("*.py"))
