"""``kvprune estimate`` does its work in a child process and adds what that child paid to end (its
compiler workers, device memory, libraries: nothing inside a process can time its own exit) to the
fixed costs, as a sweep pays it too."""

from __future__ import annotations

import pandas as pd
import pytest

from kvprune.harness.cli import main
from kvprune.harness.estimate.process_end import ENDED, run_timing_the_end
from kvprune.harness.estimate.report_rows import FIXED, HOUR, TOTAL, totals_table, with_process_end


def test_the_end_is_added_to_every_way_s_fixed_row_and_total():
    rows = [dict(task="a", mode=mode, seconds=10.0, seconds_low=9.0, seconds_high=11.0, gpu_hours=10 / HOUR,
                 prefill_hours=0.0, decode_hours=0.0, timing_subset_hours=0.0, overhead_hours=0.0, once_hours=0.0,
                 samples=3, sample_runs=6, note="") for mode in ("sweep", "batch1")]
    rows += [dict(row, task=FIXED, seconds=5.0, seconds_low=5.0, seconds_high=5.0, gpu_hours=5 / HOUR,
                  overhead_hours=5 / HOUR, samples=0, sample_runs=0, note="start 4.0 s, load 1.0 s") for row in rows]
    table = with_process_end(totals_table(rows), 2.5)
    fixed = table[table["task"] == FIXED]
    assert fixed["seconds"].tolist() == [7.5, 7.5] and fixed["seconds_low"].tolist() == [7.5, 7.5]
    assert fixed["overhead_hours"].tolist() == pytest.approx([7.5 / HOUR] * 2)
    assert set(fixed["note"]) == {"start 4.0 s, load 1.0 s, end 2.5 s"}
    total = table[table["task"] == TOTAL].set_index("mode")
    assert total.loc["sweep", "seconds"] == 17.5 and total.loc["batch1", "seconds_high"] == 18.5
    assert len(table) == 6, "one total per way, none kept from before"


def test_the_estimate_command_times_its_child_s_end(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(ENDED)  # this process is the parent, as on the command line
    out = tmp_path / "e"
    argv = ["estimate", "--preset", "tiny-omni", "--tasks", "vesus", "--limit", "1", "--methods", "fastv", "--ratios",
            "0.5", "--repeats", "1", "--modes", "sweep", "--device", "cpu", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    table = pd.read_csv(out / "estimate.csv")
    fixed = table[table["task"] == FIXED].iloc[0]
    parts = dict(part.rsplit(" ", 2)[:2] for part in fixed["note"].split(", "))
    assert list(parts) == ["start", "load", "plan", "outputs", "end"]
    assert float(parts["end"]) > 0, "a process that imported torch takes time to end"
    assert fixed["seconds"] == pytest.approx(sum(map(float, parts.values())), abs=0.3)  # the note's parts are rounded
    tasks = table[table["task"] != TOTAL]
    assert table.loc[table["task"] == TOTAL, "seconds"].item() == pytest.approx(tasks["seconds"].sum())
    assert "end " in capsys.readouterr().out, "the table printed is the one with the end in it"


def test_a_child_that_fails_gives_its_status_and_no_end(tmp_path, monkeypatch):
    monkeypatch.delenv(ENDED)
    assert run_timing_the_end(["estimate", "--ratios", "1.5", "--out", str(tmp_path / "e")]) == (2, None)
