"""A batched sweep orders a task's samples by audio length before cutting batches (rows of a batch have
similar lengths), and nothing else changes: every row keeps its sample's identity, answers and scores
equal a sweep one sample at a time, and the outputs read the same (CPU, the demo model)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kvprune.harness.cli import main
from kvprune.harness.sweep.schedule import batches, by_length
from kvprune.harness.sweep.source import PlannedSample

from kvprune.harness.tasks.sample import Sample
from tests.support import task_fixtures
from tests.support.results import result_lines

SECONDS = {"real/r0.wav": 2.5, "real/r1.wav": 0.6, "real/r2.wav": 1.8, "fake/f0.wav": 0.9, "fake/f1.wav": 2.2}


def planned(name: str, seconds: float | None) -> PlannedSample:
    return PlannedSample(Sample(name, (), "", (), "A"), None, name, name, seconds)


def test_batches_are_cut_from_the_samples_ordered_by_length_ties_and_unknowns_keeping_their_order():
    items = [(planned(n, s), n) for n, s in [("a", 3.0), ("b", 1.0), ("c", None), ("d", 2.0), ("e", 1.0)]]
    assert [name for _, name in by_length(items)] == ["b", "e", "d", "a", "c"]
    assert [[name for _, name in batch] for batch in batches(items, 2)] == [["b", "e"], ["d", "a"], ["c"]]
    assert [[name for _, name in batch] for batch in batches(items, 1)] == [[n] for n in "abcde"], "batch 1: data order"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mixed")
    task_fixtures.had(root, real=3, fake=2)
    for name, seconds in SECONDS.items():
        task_fixtures.write_audio(root / "HAD" / name, seconds)
    return root


def sweep(out: Path, data_root: Path, *extra: str) -> int:
    return main(["sweep", "--model", "demo", "--tasks", "had", "--data-root", str(data_root), "--methods", "fastv",
                 "--ratios", "0.5", "--out", str(out), "--device", "cpu", "--quiet", "--no-plots", "--max-new-tokens",
                 "3", "--timing-samples", "0", *extra])


def test_a_batched_sweep_runs_batches_of_similar_lengths_with_the_answers_and_scores_of_batch_one(data_root, tmp_path):
    assert sweep(tmp_path / "one", data_root, "--batch-size", "1") == 0
    assert sweep(tmp_path / "two", data_root, "--batch-size", "2") == 0
    one, two = result_lines(tmp_path / "one"), result_lines(tmp_path / "two")
    by_name = {row["sample_id"]: row for row in two}
    ordered = sorted(SECONDS, key=SECONDS.get)  # shortest first: the batches are its pairs
    expected = [set(ordered[i : i + 2]) for i in range(0, len(ordered), 2)]
    for method in ("none", "fastv"):
        calls: dict[str, set] = {}
        for row in two:
            if row["method"] == method:
                calls.setdefault(row["batch_id"], set()).add(row["sample_id"])
        assert sorted(calls.values(), key=lambda s: min(SECONDS[n] for n in s)) == expected
        assert all(by_name[name]["audio_seconds"] == pytest.approx(SECONDS[name]) for name in SECONDS)
    compared = ["sample_id", "position", "item", "input_hash", "reference", "method", "ratio", "output", "parsed",
                "correct", "kept_tokens"]
    key = lambda row: (row["sample_id"], row["method"])  # noqa: E731
    assert sorted(({k: r[k] for k in compared} for r in one), key=key) == sorted(
        ({k: r[k] for k in compared} for r in two), key=key)
    summaries = [pd.read_csv(tmp_path / name / "summary.csv") for name in ("one", "two")]
    columns = ["task", "method", "ratio", "samples", "accuracy"]
    pd.testing.assert_frame_equal(summaries[0][columns], summaries[1][columns])
