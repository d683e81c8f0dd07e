"""scripts/check_estimate.py: the table of an estimate beside the sweep it prices, its two commands run
together or apart (``--part``), as on a device whose calls are too short for both."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from tests.support.paths import load_script


def finished_work(work, estimate_wall=40.0, sweep_wall=100.0):
    """A work folder as the two commands leave it: the estimate's rows, the sweep's task times."""
    (work / "estimate").mkdir(parents=True)
    rows = [dict(task="a", mode="sweep", seconds=30.0, seconds_low=28.0, seconds_high=33.0, graphs=5.0),
            dict(task="a", mode="batch1", seconds=90.0, seconds_low=90.0, seconds_high=90.0, graphs=2.0),
            dict(task="b", mode="sweep", seconds=44.0, seconds_low=40.0, seconds_high=45.0, graphs=2.5),
            dict(task="fixed", mode="sweep", seconds=20.0, seconds_low=20.0, seconds_high=20.0),
            dict(task="total", mode="sweep", seconds=94.0, seconds_low=88.0, seconds_high=98.0)]
    pd.DataFrame(rows).to_csv(work / "estimate" / "estimate.csv", index=False)
    (work / "estimate" / "estimate.md").write_text("# kvprune estimate\n")
    (work / "sweep").mkdir()
    records = [dict(kind="time", task=None, seconds=1.0), dict(kind="time", task="a", seconds=25.0, cuda_graphs=4, host_loop_ns=30.0),
               dict(kind="time", task="b", seconds=55.0, cuda_graphs=1, host_loop_ns=45.0), dict(model="m", started="x")]
    (work / "sweep" / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (work / "sweep" / "report.md").write_text("# kvprune sweep\n")
    (work / "estimate.wall").write_text(f"{estimate_wall}\n")
    (work / "sweep.wall").write_text(f"{sweep_wall}\n")


def run_main(script, monkeypatch, *words):
    monkeypatch.setattr(sys, "argv", ["check_estimate.py", *map(str, words)])
    return script.main()


def test_the_table_of_two_commands_run_apart(tmp_path, monkeypatch):
    script = load_script("check_estimate")
    work, out = tmp_path / "work", tmp_path / "out"
    finished_work(work)
    assert run_main(script, monkeypatch, "--out", out, "--work", work, "--part", "table", "--", "--tasks", "a,b") == 0
    table = pd.read_csv(out / "check.csv").set_index("task")
    measured = {"a": 25.0, "b": 55.0, "fixed": 100.0 - 80.0, "total": 100.0}  # fixed: the wall time beyond the tasks
    estimated = {"a": 30.0, "b": 44.0, "fixed": 20.0, "total": 30.0 + 44.0 + 20.0}
    for task, seen in measured.items():
        assert table.loc[task, "measured_s"] == pytest.approx(seen)
        assert table.loc[task, "error"] == pytest.approx(estimated[task] / seen - 1)
    graphs = {"a": (5.0, 4.0), "b": (2.5, 1.0), "total": (7.5, 5.0)}  # priced by the estimate / captured by the sweep
    for task, (priced, captured) in graphs.items():
        assert (table.loc[task, "estimated_graphs"], table.loc[task, "measured_graphs"]) == (priced, captured)
    assert pd.isna(table.loc["fixed", "estimated_graphs"]) and pd.isna(table.loc["fixed", "measured_graphs"])
    check = (out / "check.md").read_text()
    assert "+20.0%" in check and "-20.0%" in check and "(40 s)" in check and "(100 s)" in check
    assert "| a | 30.0 (28.0-33.0) | 25.0 | +20.0% | 5.0 / 4 |" in check and "| fixed | 20.0 (20.0-20.0) | 20.0 | +0.0% | — / — |" in check
    assert (out / "estimate.md").is_file() and (out / "sweep_report.md").is_file()


def test_a_part_records_its_wall_time_and_a_table_needs_both(tmp_path, monkeypatch):
    script = load_script("check_estimate")
    work = tmp_path / "work"
    assert script.run_part("sweep", [sys.executable, "-c", "pass"], work) > 0
    assert float((work / "sweep.wall").read_text()) > 0
    with pytest.raises(SystemExit) as stopped:
        run_main(script, monkeypatch, "--out", tmp_path / "out", "--work", work, "--part", "table")
    assert stopped.value.code == 2
    with pytest.raises(SystemExit) as stopped:
        run_main(script, monkeypatch, "--out", tmp_path / "out", "--work", work, "--part", "sweep", "--rounds", "2")
    assert stopped.value.code == 2


def test_the_commit_line_says_when_the_tree_is_not_the_commit(tmp_path, monkeypatch):
    """A device receives the working tree with an older .git: the table must not name that commit as the code."""
    import subprocess

    script = load_script("check_estimate")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *words: subprocess.run(["git", "-C", str(repo), *words], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (repo / "code.py").write_text("a = 1\n")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    monkeypatch.chdir(repo)
    assert script.commit() == head
    (repo / "code.py").write_text("a = 2\n")  # the tree of a later commit
    assert script.commit() == f"{head}, tracked files changed since (record the tree's commit by hand)"


def test_each_round_is_kept_beside_the_medians(tmp_path):
    """Two rounds: the table holds their medians, rounds.csv and check.md each round's seconds per task, so
    that a task's error can be told to be the host's noise (rounds apart) or the estimate's bias."""
    import argparse

    script = load_script("check_estimate")
    work, out = tmp_path / "work", tmp_path / "out"
    finished_work(work)
    out.mkdir()
    first_estimate, first_sweep = script.estimated(work / "estimate"), script.swept(work / "sweep", 100.0)
    second_estimate, second_sweep = first_estimate.copy(), first_sweep.copy()
    second_estimate.loc["a", "seconds"], second_sweep.loc["a", "seconds"] = 34.0, 15.0
    args = argparse.Namespace(out=out, rounds=2)
    commands = {"estimate": ["python", "-m", "cli", "estimate", "--quiet"], "sweep": ["python", "-m", "cli", "sweep", "--quiet"]}
    script.write_outputs(args, work, commands, [(40.0, 100.0), (42.0, 90.0)], [first_estimate, second_estimate],
                         [first_sweep, second_sweep])
    table = pd.read_csv(out / "check.csv").set_index("task")
    assert table.loc["a", "estimated_s"] == 32.0 and table.loc["a", "measured_s"] == 20.0  # medians of 30, 34 and 25, 15
    rounds = pd.read_csv(out / "rounds.csv")
    a = rounds[rounds["task"] == "a"]
    assert list(a["round"]) == [1, 2] and list(a["estimated_s"]) == [30.0, 34.0] and list(a["measured_s"]) == [25.0, 15.0]
    check = (out / "check.md").read_text()
    assert "| task | round 1 | round 2 |" in check and "| a | 30.0 / 25.0 | 34.0 / 15.0 |" in check
    # the commands' wall times are medians as the table's are (of two rounds: their mean, not the later one)
    assert "(41 s)" in check and "(95 s, median of 2 rounds: 40 s / 100 s; 42 s / 90 s)" in check


def estimate_host_speeds(script, monkeypatch, speeds: list[float]) -> None:
    """Each round's commands stand in for themselves (the finished work's outputs stay): the estimate's timed.csv holds
    one batch of task a, timed on a host whose loop took the round's ``speeds`` ns."""
    rounds = iter(speeds)

    def run_part(side, command, folder):
        if side == "estimate":
            (folder / "estimate" / "timed.csv").write_text(f"kind,task,host_loop_ns\nbatch,a,{next(rounds)}\n")
        return 10.0

    monkeypatch.setattr(script, "run_part", run_part)


def test_every_round_s_timed_calls_are_kept_with_their_round(tmp_path, monkeypatch):
    """Two rounds of the two commands (each stands in for its command: the estimate's timed.csv differs per round):
    estimate_timed.csv holds both rounds' rows, each with its round, not only the last round's."""
    script = load_script("check_estimate")
    work, out = tmp_path / "work", tmp_path / "out"
    finished_work(work)
    estimate_host_speeds(script, monkeypatch, [31.0, 32.0])
    assert run_main(script, monkeypatch, "--out", out, "--work", work, "--rounds", 2, "--", "--tasks", "a,b") == 0
    timed = pd.read_csv(out / "estimate_timed.csv")
    assert list(timed["round"]) == [1, 2] and list(timed["host_loop_ns"]) == [31.0, 32.0] and set(timed["task"]) == {"a"}
    a = pd.read_csv(out / "rounds.csv").query("task == 'a'")  # the host's speed each side saw, round by round
    assert list(a["estimated_host_ns"]) == [31.0, 32.0] and list(a["measured_host_ns"]) == [30.0, 30.0]


def test_a_round_timed_on_hosts_far_apart_in_speed_is_marked(tmp_path, monkeypatch):
    """Round 2's estimate ran on a host 1.67x slower than the sweep's (a loop of 50 ns against 30): its cell for the
    task is marked, with both speeds and a footnote; round 1's (31 against 30 ns) and a task without speeds are not."""
    script = load_script("check_estimate")
    work, out = tmp_path / "work", tmp_path / "out"
    finished_work(work)
    estimate_host_speeds(script, monkeypatch, [31.0, 50.0])
    assert run_main(script, monkeypatch, "--out", out, "--work", work, "--rounds", 2, "--", "--tasks", "a,b") == 0
    rows = {line.split(" | ")[0]: line for line in (out / "check.md").read_text().splitlines() if line.startswith("| ")}
    round_1, round_2 = rows["| a"].split(" | ")[1:3]
    assert "†" not in round_1 and round_2.endswith("† (50 / 30 ns) |")
    assert "†" not in rows["| b"]
    assert "more than 1.3x apart in speed" in (out / "check.md").read_text()
