"""Suites: a benchmark's tasks under one name (``--tasks starbench``), with its aggregate score.

A suite is its benchmark's ``suite.yaml`` (``benchmarks/<name>/suite.yaml``), named as the folder::

    title: STAR-Bench
    benchmark: STAR-Bench
    tasks: [starbench_pc, starbench_sr, starbench_tr]
    aggregate: [starbench_aa, starbench_acr]   # metrics averaged over the tasks (optional)
    aggregate_name: MA                          # what the benchmark calls that average

``aggregate`` names metrics every task of the suite reports; the suite's score for each is the plain
mean over its tasks (STAR-Bench's "Final MA" averages the three parts' AA and ACR so). The summary
writes it beside the per-task breakdowns (``breakdown.csv``, report.md) for every model x method x
ratio that ran all the suite's tasks. ``groups`` names groups of its tasks whose primary scores are
averaged (AudioMarathon's categories and its leaderboard's average over the ten tasks), each for the
runs that ran all of the group's tasks. ``levels`` names a benchmark's own aggregates beyond a mean
(``SUITE_LEVELS``: AVI-Bench's stage scores, Overall and L1), computed from whichever of its tasks
ran; ``notes`` is shown with them. AudioMarathon's suite also scores its tasks' samples together per
duration bucket (``duration_buckets``: analyse_all's). A task run under a protocol
(``gtzan@audiomarathon``) counts as the suite's task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kvprune.registry import Registry

from ..scoring.durations import DurationBuckets, suite_buckets
from .benchmark import BENCHMARKS
from .config_files import TaskConfigError


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    benchmark: str
    tasks: tuple[str, ...]
    aggregate: tuple[str, ...] = ()
    aggregate_name: str = "mean"
    levels: str | None = None
    notes: str = ""
    groups: dict = field(default_factory=dict)  # group name -> its tasks

    @property
    def duration_buckets(self) -> DurationBuckets | None:
        """The buckets of its tasks' durations together (AudioMarathon's analyse_all); None: no such view."""
        return suite_buckets(self.benchmark)


_FIELDS = {"title": str, "benchmark": str, "tasks": list, "aggregate": list, "aggregate_name": str, "levels": str,
           "notes": str, "groups": dict}
#: a benchmark's own aggregates: name -> ``fn(rows_by_task, scores) -> {level: score}``, both keyed by the
#: tasks' abbreviations (the rows of each task that ran, its primary score); registered by the benchmark's
#: metrics module
SUITE_LEVELS: Registry = Registry("suite levels")


def read_suite(path: Path, name: str | None = None) -> Suite:
    """The suite in a YAML file, named ``name`` (default: the file's name); TaskConfigError naming the
    file and field when it is malformed."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise TaskConfigError(f"{path}: cannot read the suite ({error})") from None
    if not isinstance(raw, dict):
        raise TaskConfigError(f"{path}: expected a mapping of suite fields")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise TaskConfigError(f"{path}: unknown field(s) {unknown}; a suite has {sorted(_FIELDS)}")
    for key, kind in _FIELDS.items():
        if key in raw and not isinstance(raw[key], kind):
            raise TaskConfigError(f"{path}: field {key!r}: expected {kind.__name__}")
    if not raw.get("tasks") or not all(isinstance(t, str) for t in raw["tasks"]):
        raise TaskConfigError(f"{path}: field 'tasks': list the suite's task names")
    for group, members in raw.get("groups", {}).items():
        if not isinstance(members, list) or not members or not set(members) <= set(raw["tasks"]):
            raise TaskConfigError(f"{path}: field 'groups': group {group!r} must list some of the suite's tasks")
    name = name or path.stem
    return Suite(name, raw.get("title", name), raw.get("benchmark", ""), tuple(raw["tasks"]),
                 tuple(raw.get("aggregate", ())), raw.get("aggregate_name", "mean"), raw.get("levels"), raw.get("notes", ""),
                 {group: tuple(members) for group, members in raw.get("groups", {}).items()})


SUITES: Registry[Path] = Registry("suite")  # a benchmark's name -> its suite.yaml
for _benchmark in BENCHMARKS.values():
    if _benchmark.suite_file is not None:
        SUITES.register(_benchmark.name, _benchmark.suite_file)


def get_suite(name: str) -> Suite:
    return read_suite(SUITES.get(name), name)


def list_suites() -> list[Suite]:
    return [get_suite(name) for name in SUITES.names()]


def expand_suites(names: list[str]) -> list[str]:
    """Task names with every suite name replaced by its tasks (each task once, first place kept)."""
    expanded: list[str] = []
    for name in names:
        for task in get_suite(name).tasks if name in SUITES else (name,):
            if task not in expanded:
                expanded.append(task)
    return expanded
