"""The benchmarks, one folder each under ``benchmarks/``, as lm-evaluation-harness keeps its tasks.

A benchmark's folder holds its task YAMLs (a file whose name starts with ``_`` is a base the others
include, not a task), its suite (``suite.yaml``, named as the folder), its scoring rules as pure
functions and the modules that register what those rules add (``metrics.py``, and where it has its
own, ``parsers.py``, ``variants.py``, ``layout.py``: imported by ``benchmarks/__init__.py``), and a
``README.md`` saying where we follow the benchmark's official protocol and where we depart from it.
``BENCHMARKS`` finds each folder by name; the task and suite registries read their YAMLs from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvprune.registry import Registry

BENCHMARKS_DIR = Path(__file__).parent / "benchmarks"
SUITE_FILE = "suite.yaml"


@dataclass(frozen=True)
class Benchmark:
    """One benchmark's folder."""

    name: str
    folder: Path

    @property
    def configs(self) -> dict[str, Path]:
        """Its task YAML files by name, bases (``_...``) included."""
        return {path.stem: path for path in sorted(self.folder.glob("*.yaml")) if path.name != SUITE_FILE}

    @property
    def suite_file(self) -> Path | None:
        """Its suite's YAML file, if it has one."""
        path = self.folder / SUITE_FILE
        return path if path.is_file() else None

    @property
    def readme(self) -> Path:
        return self.folder / "README.md"


BENCHMARKS: Registry[Benchmark] = Registry("benchmark")
for _folder in sorted(BENCHMARKS_DIR.iterdir()):
    if _folder.is_dir() and not _folder.name.startswith(("_", ".")):
        BENCHMARKS.register(_folder.name, Benchmark(_folder.name, _folder))


def builtin_configs() -> dict[str, Path]:
    """Every built-in task config by name, bases (``_...``) included, sorted by name; a name two
    benchmarks' folders both use is refused (a task is found by its name alone)."""
    found: dict[str, Path] = {}
    for benchmark in BENCHMARKS.values():
        for name, path in benchmark.configs.items():
            if name in found:
                raise ValueError(f"two built-in task files are named {name!r}: {found[name]} and {path}; rename one")
            found[name] = path
    return dict(sorted(found.items()))
