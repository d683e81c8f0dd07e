"""``kvprune sweep --batch-size auto``: the sweep runs at the size the estimate prices cheapest, and says
which and why (printed, in runs.jsonl, in report.md); CPU, the demo model."""

from __future__ import annotations

import pandas as pd
import pytest

from kvprune.harness.cli import main
from kvprune.harness.estimate import estimate as estimate_module
from kvprune.harness.sweep.store import read_log

from tests.support.results import result_lines

SWEEP = ["sweep", "--tasks", "demo_pitch", "--limit", "9", "--methods", "fastv", "--ratios", "0.5", "--timing-samples",
         "1", "--device", "cpu", "--quiet", "--no-plots", "--batch-size", "auto"]


def test_the_sweep_runs_at_the_size_the_estimate_prices_cheapest_and_says_why(tmp_path, monkeypatch, capsys):
    priced = {1: 50.0, 8: 20.0, 9: 35.0}  # the estimate's totals for the tasks at each size: 8 is cheapest
    asked = []

    def estimate(config, progress=True, outputs=True, loaded=None, timing_subset=True):
        assert not timing_subset and not outputs, "what every size pays alike is left out"
        asked.append(config.batch_size)
        return pd.DataFrame([dict(task="demo_pitch", mode="sweep", samples=9, seconds=priced[config.batch_size] + 1.0,
                                  lazy_seconds=1.0), dict(task="fixed", mode="sweep", samples=0, seconds=99.0, lazy_seconds=0)])

    monkeypatch.setattr(estimate_module, "run_estimate", estimate)
    out = tmp_path / "auto"
    assert main([*SWEEP, "--out", str(out)]) == 0
    assert asked == [1, 8, 9], "32 is past the largest task's 9 samples: it would run them as one batch of 9"
    said = capsys.readouterr().out
    assert "--batch-size auto chose 8" in said and "batch 1: 50 s, batch 8: 20 s" in said
    scoring = [row for row in result_lines(out) if row.get("pass") is None]
    assert {row["batch_size"] for row in scoring} == {8, 1}, "batches of 8 (and the ninth sample alone)"
    assert "chose 8" in read_log(out)[-1]["config"]["batch_choice"]
    assert "Batch size: --batch-size auto chose 8" in (out / "report.md").read_text()


def test_batch_size_auto_on_the_real_estimate_runs_and_records_its_choice(tmp_path, capsys):
    out = tmp_path / "auto"
    assert main([*SWEEP, "--out", str(out)]) == 0
    choice = read_log(out)[-1]["config"]["batch_choice"]
    chosen = read_log(out)[-1]["config"]["batch_size"]
    assert f"chose {chosen}:" in choice and "batch 1:" in choice and "batch 8:" in choice
    assert choice in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["estimate", "--batch-size", "auto"], "prices one batch size"),
    (["sweep", "--batch-size", "some"], "not a whole number or auto"),
])
def test_auto_is_for_the_sweep_and_other_words_are_refused(argv, words, tmp_path, capsys):
    with pytest.raises(SystemExit) if argv[0] == "sweep" else _returns(2):
        assert main([*argv, "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert words in capsys.readouterr().err


def test_several_processes_do_not_choose_each_their_own(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(estimate_module, "run_estimate", lambda *a, **k: pytest.fail("an estimate started"))
    assert main([*SWEEP, "--out", str(tmp_path / "x")]) == 2
    assert "chooses in one process" in capsys.readouterr().err


class _returns:
    def __init__(self, code: int):
        self.code = code

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False
