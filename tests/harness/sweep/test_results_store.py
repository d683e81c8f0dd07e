"""The results file: appended line by line, read back after a kill or with a corrupt line, keyed for
resuming."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvprune.harness.sweep.rows import ResultRow
from kvprune.harness.sweep.store import (
    ResultsFileWarning, ResultStore, append_log_line, clear_outputs, read_results, read_rows, recorded_tasks, unique_runs,
)
from kvprune.harness.tasks.task import get_task


def _row(sample, method="fastv", ratio=0.5, error=None) -> ResultRow:
    return ResultRow.from_json(dict(model="m", task="t", method=method, ratio=ratio, layer=2, method_id="f1", sample_id=sample,
                                    input_hash="h", settings_id="s", error=error))


def test_rows_survive_a_cut_last_line_and_keys_skip_done_runs(tmp_path):
    store = ResultStore(tmp_path)
    store.append(_row("a"))
    store.append(_row("b", error="OutOfMemoryError: ..."))
    store.close()
    with open(tmp_path / "results.jsonl", "a") as handle:  # a kill in the middle of a write
        handle.write('{"model": "m", "task": "t", "meth')
    with pytest.warns(ResultsFileWarning, match="results.jsonl, line 3: .*cut short"):
        assert [r.sample_id for r in read_rows(tmp_path)] == ["a", "b"]
        again = ResultStore(tmp_path)
        assert again.done_keys() == {_row("a").key, _row("b").key}
        assert again.done_keys(retry_errors=True) == {_row("a").key}
    again.append(_row("c"))
    again.close()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["sample_id"] for line in lines] == ["a", "b", "c"], "the cut line is gone, every line whole"


def test_a_corrupt_line_names_its_file_and_line_and_the_rest_is_read(tmp_path):
    store = ResultStore(tmp_path)
    for sample in "abc":
        store.append(_row(sample))
    store.close()
    path = tmp_path / "results.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], '{"model": "m", oops}', "[1, 2]", *lines[1:]]) + "\n")
    with pytest.warns(ResultsFileWarning) as caught:
        assert [r.sample_id for r in read_rows(tmp_path)] == ["a", "b", "c"]
    messages = [str(w.message) for w in caught]
    assert any(f"{path}, line 2: not a JSON object" in m for m in messages)
    assert any(f"{path}, line 3: not a JSON object" in m for m in messages)
    append_log_line(tmp_path, {"tasks": {"had": get_task("had").config}})
    with open(tmp_path / "runs.jsonl", "a") as handle:
        handle.write('{"tasks": {"had": {"na')
    with pytest.warns(ResultsFileWarning, match="runs.jsonl, line 2"):
        assert list(recorded_tasks(tmp_path)) == ["had"]


def test_a_retried_run_is_read_once_and_its_success_wins():
    rows = [_row("a", error="OutOfMemoryError: ..."), _row("b"), replace(_row("a"), output="A"), _row("b", error="late")]
    unique = unique_runs(rows)
    assert [(r.sample_id, r.error) for r in unique] == [("a", None), ("b", None)]


def test_overwrite_removes_what_sweeps_write_and_nothing_else(tmp_path):
    written = ["results.jsonl", "results.rank1.jsonl", "runs.jsonl", "plan.json", "audio-digests.json", "summary.csv",
               "breakdown.csv", "report.md", "demo_score_vs_ratio.png", "demo_score_vs_prefill.png", "demo_kv_saved.png"]
    for name in [*written, "notes.txt", "other.png"]:
        (tmp_path / name).write_text("")
    assert sorted(p.name for p in clear_outputs(tmp_path)) == sorted(written)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "other.png"]


def test_ratio_in_keys_ignores_float_noise():
    assert _row("a", ratio=0.30000000000000004).key == _row("a", ratio=0.3).key


def test_each_process_of_a_distributed_sweep_has_its_own_file(tmp_path):
    for rank in range(2):
        store = ResultStore(tmp_path, rank=rank, world_size=2)
        store.append(_row(f"s{rank}"))
        store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.rank0.jsonl", "results.rank1.jsonl"]
    assert sorted(read_results(tmp_path)["sample_id"]) == ["s0", "s1"]


def test_reading_an_empty_folder_says_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="results\\*.jsonl"):
        read_results(tmp_path)
