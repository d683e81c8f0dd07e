"""The import drawing, read from the source: every import statement of kvprune/, presses/ and harness/
(function-level ones too, as they run sooner or later), with the installed names kvprune.presses and
kvprune.harness mapped to their folders. No module imports itself through others, the core imports
nothing of the harness, and no arrow of the harness runs back up its layers."""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from tests.support.paths import REPO

FOLDERS = {"kvprune": REPO / "kvprune", "kvprune.presses": REPO / "presses", "kvprune.harness": REPO / "harness"}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    where: str  # file:line of the import statement

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported}  ({self.where})"


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@lru_cache(maxsize=None)
def _modules() -> dict[str, Path]:
    """Module name -> file, as installed (``presses/knorm.py`` is ``kvprune.presses.knorm``)."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            found[".".join((package, *parts[:-1 if parts[-1] == "__init__" else None]))] = path
    return found


def _known(name: str) -> str | None:
    """The module an imported name lives in: the longest known module that the name starts with."""
    while name and name not in _modules():
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the module's package, one level up per extra dot
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    # ``from package import module`` imports the module; ``from module import name``, the module
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in _modules() else base for alias in node.names]


@lru_cache(maxsize=None)
def _edges() -> tuple[Edge, ...]:
    found = set()
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported_names(node, module, path.name == "__init__.py"):
                target = _known(name) if _within(name, "kvprune") else None
                if target and target != module:
                    found.add(Edge(module, target, f"{path.relative_to(REPO)}:{node.lineno}"))
    return tuple(sorted(found, key=lambda e: (e.importer, e.imported, e.where)))


def _graph() -> dict[str, set[str]]:
    graph = {module: set() for module in _modules()}
    for edge in _edges():
        graph[edge.importer].add(edge.imported)
    return graph


def _paths_from(graph: dict[str, set[str]], start: str) -> dict[str, str | None]:
    """Every module reachable from ``start``, with the module it is first reached from (breadth first)."""
    parent, queue = {start: None}, deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] - parent.keys()):
            parent[nxt] = node
            queue.append(nxt)
    return parent


def _shortest_cycle(graph: dict[str, set[str]], start: str) -> list[str]:
    """start -> ... -> start, ``start`` being on a cycle."""
    parent = _paths_from(graph, start)
    node = next(n for n in parent if start in graph[n])  # the nearest: ``parent`` is in breadth-first order
    path = [start]
    while node is not None:
        path.append(node)
        node = parent[node]
    return path[::-1]


def test_the_graph_is_read_from_every_module():
    """A guard for the checks below: they see the modules and arrows that certainly exist."""
    names = set(_modules())
    assert {"kvprune.engine", "kvprune.presses.knorm", "kvprune.harness.sweep.runner", "kvprune.harness"} <= names
    arrows = {(e.importer, e.imported) for e in _edges()}
    assert ("kvprune.presses.knorm", "kvprune.press") in arrows, "absolute imports, presses/ as kvprune.presses"
    assert ("kvprune.harness.cli", "kvprune.harness.sweep.runner") in arrows, "relative imports inside functions"


def test_no_module_imports_itself_through_others():
    graph = _graph()
    reach = {module: _paths_from(graph, module).keys() for module in graph}
    where = {(e.importer, e.imported): e.where for e in _edges()}
    reported, cycles = set(), []
    for module in graph:
        circle = {other for other in reach[module] if module in reach[other]} - {module}
        if circle and module not in reported:  # one shortest cycle per set of modules that import each other
            reported |= circle | {module}
            cycle = _shortest_cycle(graph, module)
            cycles.append(f"{len(circle) + 1} modules import each other, e.g.\n"
                          + "\n".join(f"  {a} -> {b}  ({where[a, b]})" for a, b in zip(cycle, cycle[1:])))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@dataclass(frozen=True)
class Rule:
    """Modules under ``importer`` (and not under ``importer_except``) import nothing under ``forbidden``
    (other than under ``allowed``)."""

    importer: str
    forbidden: str
    why: str
    importer_except: str = ""
    allowed: tuple[str, ...] = ()

    def broken_by(self, edge: Edge) -> bool:
        return (
            _within(edge.importer, self.importer)
            and not (self.importer_except and _within(edge.importer, self.importer_except))
            and _within(edge.imported, self.forbidden)
            and not any(_within(edge.imported, package) for package in self.allowed)
        )


H = "kvprune.harness"
RULES = [
    Rule("kvprune", H, "the core (kvprune/, presses/) never imports the harness", importer_except=H),
    *(Rule(f"{H}.setup", f"{H}.{above}", "setup is what sweep and bench share: it sits below them and the tasks")
      for above in ("sweep", "bench", "tasks", "demo")),
    Rule(f"{H}.bench", f"{H}.sweep", "sweep and bench are siblings on setup"),
    Rule(f"{H}.sweep", f"{H}.bench", "sweep and bench are siblings on setup"),
    Rule(f"{H}.tasks", f"{H}.sweep", "tasks are read by the sweep, never the other way"),
    Rule(f"{H}.tasks", f"{H}.bench", "tasks know nothing of speed measurement"),
    Rule(f"{H}.scoring", H, "scoring/ is a leaf: what the benchmarks' rules share", allowed=(f"{H}.scoring",)),
    Rule(f"{H}.judge", H, "judge/ is a leaf: a request in, a reply out", allowed=(f"{H}.judge",)),
]
BENCHMARKS = f"{H}.tasks.benchmarks"
#: the modules of a benchmark's folder that register what its rules add; every other module is its rules
REGISTERING = {"metrics", "parsers", "variants", "layout"}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.importer}~{r.forbidden}".replace("kvprune.", ""))
def test_no_arrow_runs_back_up(rule):
    assert any(_within(m, rule.importer) for m in _modules()), f"no module under {rule.importer}: the rule is stale"
    broken = [str(edge) for edge in _edges() if rule.broken_by(edge)]
    assert not broken, f"{rule.why}, but:\n  " + "\n  ".join(broken)


def _benchmark_module(module: str) -> bool:
    """A module inside one benchmark's folder (not the package that imports them all)."""
    return _within(module, BENCHMARKS) and module.count(".") > BENCHMARKS.count(".") + 1


def test_a_benchmarks_rules_import_only_the_shared_arithmetic_and_a_judge():
    """A benchmark's rules are pure functions over plain data, as the official code computes them: they
    import only ``scoring/``, ``judge/`` (the judged rules: AVI-Bench's refine step, MMAR-Rubrics) and
    other rules (MMAR's use MMAU's ``string_match``); what registers them in the task machinery is
    apart (``REGISTERING``)."""
    rules = {m for m in _modules() if _benchmark_module(m) and m.rpartition(".")[2] not in REGISTERING
             and not _modules()[m].name == "__init__.py"}
    assert {f"{BENCHMARKS}.starbench.rules", f"{BENCHMARKS}.avibench.refine"} <= rules, "the rules modules were found"
    allowed = (f"{H}.scoring", f"{H}.judge", *rules)
    broken = [str(e) for e in _edges() if e.importer in rules and _within(e.imported, H)
              and not any(_within(e.imported, a) for a in allowed)]
    assert not broken, "a benchmark's rules import the harness beyond scoring/ and judge/:\n  " + "\n  ".join(broken)


def test_the_task_machinery_imports_no_benchmark():
    """Benchmarks sit on the shared task machinery (task model, registries, parsers, metrics, layouts);
    only the ``tasks`` package itself imports them, so that importing it registers every built-in."""
    tasks = f"{H}.tasks"
    broken = [str(e) for e in _edges() if _within(e.importer, tasks) and e.importer != tasks
              and not _within(e.importer, BENCHMARKS) and _within(e.imported, BENCHMARKS)]
    assert not broken, "the shared task machinery imports a benchmark:\n  " + "\n  ".join(broken)
