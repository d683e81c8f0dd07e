"""The benchmarks' folders (harness/tasks/benchmarks/): each found by name, holding its README, tasks and
suite, and the task and suite registries reading their YAMLs from there."""

from __future__ import annotations

import pytest

from kvprune.harness.tasks.benchmark import BENCHMARKS, Benchmark, builtin_configs
from kvprune.harness.tasks.suites import SUITES, get_suite
from kvprune.harness.tasks.task import get_task, list_tasks


def test_every_benchmark_folder_has_a_readme_and_tasks():
    assert {"audiomarathon", "avibench", "demo", "mmar", "mmau", "starbench", "staudioqa"} <= set(BENCHMARKS)
    for benchmark in BENCHMARKS.values():
        assert benchmark.readme.is_file(), f"{benchmark.folder} has no README.md"
        assert [name for name in benchmark.configs if not name.startswith("_")], f"{benchmark.folder} holds no task"


def test_tasks_and_suites_are_read_from_the_folders():
    tasks = {name for benchmark in BENCHMARKS.values() for name in benchmark.configs if not name.startswith("_")}
    assert set(list_tasks()) == tasks and list_tasks() == sorted(tasks)
    assert set(SUITES) == {b.name for b in BENCHMARKS.values() if b.suite_file is not None}
    assert get_suite("starbench").name == "starbench" and get_task("gtzan").benchmark == "AudioMarathon"


def test_a_base_of_another_folder_is_included_by_name():
    """MMAR builds on MMAU's base (``include: _mmau``), which lives in MMAU's folder."""
    assert builtin_configs()["_mmau"].parent == BENCHMARKS.get("mmau").folder
    assert get_task("mmar").config["metrics"] == get_task("mmau").config["metrics"] == ["string_match"]


def test_two_built_in_task_files_of_one_name_are_refused(tmp_path):
    (tmp_path / "gtzan.yaml").write_text("title: another gtzan\n")
    BENCHMARKS.register("clash", Benchmark("clash", tmp_path))
    try:
        with pytest.raises(ValueError, match="two built-in task files are named 'gtzan'"):
            builtin_configs()
    finally:
        BENCHMARKS.unregister("clash")
