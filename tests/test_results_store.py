"""The results file: appended line by line, read back after a kill, keyed for resuming."""

from __future__ import annotations

import pytest

from kvprune.harness.sweep.ratios import parse_ratios
from kvprune.harness.sweep.store import ResultStore, read_results, read_rows, run_key


def _row(sample, method="fastv", ratio=0.5, error=None):
    return dict(model="m", task="t", method=method, ratio=ratio, layer=2, method_id="f1", sample_id=sample, input_hash="h",
                settings_id="s", error=error)


def test_rows_survive_a_cut_last_line_and_keys_skip_done_runs(tmp_path):
    store = ResultStore(tmp_path)
    store.append(_row("a"))
    store.append(_row("b", error="OutOfMemoryError: ..."))
    store.close()
    with open(tmp_path / "results.jsonl", "a") as handle:  # a kill in the middle of a write
        handle.write('{"model": "m", "task": "t", "meth')
    assert [r["sample_id"] for r in read_rows(tmp_path)] == ["a", "b"]
    again = ResultStore(tmp_path)
    assert again.done_keys() == {run_key(_row("a")), run_key(_row("b"))}
    assert again.done_keys(retry_errors=True) == {run_key(_row("a"))}
    again.append(_row("c"))
    again.close()
    assert [r["sample_id"] for r in read_rows(tmp_path)] == ["a", "b", "c"]


def test_ratio_in_keys_ignores_float_noise():
    assert run_key(_row("a", ratio=0.30000000000000004)) == run_key(_row("a", ratio=0.3))


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


@pytest.mark.parametrize(
    "text,expected",
    [("0.1..0.9", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]), ("0.1..0.9:0.2", [0.1, 0.3, 0.5, 0.7, 0.9]),
     ("0.9..0.1", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]), ("0.7..0.3:0.2", [0.3, 0.5, 0.7]),
     ("0,0.5,0.9", [0.0, 0.5, 0.9]), ("0.5", [0.5]), (["0.1..0.2", 0.7], [0.1, 0.2, 0.7])],
)
def test_ratio_specifications(text, expected):
    assert parse_ratios(text) == expected


@pytest.mark.parametrize("text,message", [("0.5..1.0", "ratio=1.0"), ("fast", "cannot read ratios"), (",", "name no ratio: write a range"), ("0..0.5:0", "cannot read")])
def test_bad_ratio_specifications_say_how_to_write_them(text, message):
    with pytest.raises(ValueError, match=message):
        parse_ratios(text)
