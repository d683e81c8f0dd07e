"""``kvprune sweep --preset``: the whole sweep (batches ordered by length, sharing, the timing subset,
every output) on random weights at a bench preset's shape, with made-up prompts at each task's
published durations and answers of their planned lengths, every output saying it is a dry run (CPU,
a tiny preset)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvprune.harness.cli import main
from kvprune.harness.estimate.published import published
from kvprune.harness.sweep.store import TIMING_PASS, read_log

from tests.support.results import result_lines

DRY = ["sweep", "--preset", "tiny-omni", "--tasks", "vesus", "--limit", "3", "--batch-size", "2", "--methods", "fastv",
       "--ratios", "0.5", "--timing-samples", "1", "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dry")
    assert main([*DRY, "--out", str(folder)]) == 0
    return folder


def test_a_dry_run_runs_the_whole_sweep_on_made_up_prompts_at_the_published_durations(out):
    rows = result_lines(out)
    scoring = [r for r in rows if r.get("pass") is None]
    timing = [r for r in rows if r.get("pass") == TIMING_PASS]
    assert len(scoring) == 3 * 2 and len(timing) == 1 * 2 and all(not r["error"] for r in rows)
    low, high = published("vesus").seconds
    assert all(low <= r["audio_seconds"] <= high for r in rows)
    assert all(r["new_tokens"] == 2 for r in rows), "letter answers: decoded to the letter and the end token"
    lengths = {r["sample_id"]: r["audio_seconds"] for r in scoring}
    for method in ("none", "fastv"):
        batches: dict[str, list] = {}
        for r in scoring:
            if r["method"] == method:
                batches.setdefault(r["batch_id"], []).append(lengths[r["sample_id"]])
        first, second = sorted(batches.values(), key=len, reverse=True)
        assert max(first) <= min(second), "batches cut from the samples ordered by length"
    assert all(r["encoder_reused"] for r in scoring if r["method"] != "none")
    assert all(r["dry_run"] for r in rows)


def test_every_output_says_it_is_a_dry_run(out):
    report = (out / "report.md").read_text()
    assert "**Dry run**" in report and "tiny-omni" in report and "meaningless" in report
    run = read_log(out)[0]
    assert "random weights" in run["dry_run"] and run["model"] == "tiny-omni"
    plan = json.loads((out / "plan.json").read_text())
    assert plan["models"]["tiny-omni"].startswith("preset:tiny-omni:random-weights")
    assert not pd.read_csv(out / "summary.csv").empty


def test_rerunning_a_dry_run_resumes_it(out):
    before = len(result_lines(out))
    assert main([*DRY, "--out", str(out)]) == 0
    assert len(result_lines(out)) == before


@pytest.mark.parametrize("argv, words", [
    (["--preset", "no-such-preset", "--tasks", "vesus"], "unknown preset"),
    (["--preset", "tiny-omni", "--model", "demo", "--tasks", "vesus"], "not both"),
    (["--preset", "tiny-omni"], "no task"),
    (["--preset", "tiny-omni", "--tasks", "demo_pitch"], "nothing is published"),
])
def test_bad_dry_runs_are_refused_before_any_work(argv, words, tmp_path, capsys):
    assert main(["sweep", *argv, "--out", str(tmp_path / "dry"), "--quiet"]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "dry").exists()
