"""scripts/gpu_session.py, the one GPU call of the benchmarks, runs its passes on tiny presets on the
CPU: every mode it runs on the GPU works here first, and it writes what it says (at most 8 files)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.support.paths import load_script

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def session(monkeypatch):
    return load_script("gpu_session", monkeypatch)


def test_every_pass_runs_on_tiny_presets_and_writes_at_most_8_files(session, tmp_path):
    out = tmp_path / "out"
    assert session.main(["--tiny", "--in-process", "--out", str(out), "--others", "aero-1-audio-1.5b,phi4-mm"]) == 0
    written = sorted(path.relative_to(out).as_posix() for path in out.rglob("*"))
    assert written == ["batch.md", "bench.csv", "cache_presses.md", "env.txt", "log.txt", "other_presets.md",
                       "targets.md", "targets.png"]
    rows = pd.read_csv(out / "bench.csv")
    assert rows["error"].isna().all(), rows["error"].dropna().tolist()
    assert rows.groupby("mode")["preset"].unique().map(sorted).to_dict() == {
        "compare": ["tiny-aero", "tiny-omni", "tiny-phi4"], "ratios": ["tiny-omni"], "batch": ["tiny-omni"],
    }
    cache = rows[rows["command"].str.contains(session.CACHE_METHODS, regex=False) & (rows["mode"] == "ratios")]
    assert set(cache[cache["kind"] == "cache"]["method"]) == set(session.CACHE_METHODS.split(",")) - {"frame+knorm"}
    assert sorted(rows[rows["mode"] == "batch"]["batch"].unique()) == [1, 16, 64]
    assert "| target | measured | bound | met |" in (out / "targets.md").read_text()
    log = (out / "log.txt").read_text()
    assert log.count(": exit 0,") == 4 and "--max-minutes" in log


def test_passes_past_the_budget_are_skipped(session, tmp_path):
    assert session.main(["--tiny", "--in-process", "--out", str(tmp_path), "--minutes", "0"]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["env.txt", "log.txt"]
    assert (tmp_path / "log.txt").read_text().count("skipped, 0.0 min left") == 4


def test_passes_run_in_the_order_given_and_cover_the_newer_families(session, tmp_path):
    out = tmp_path / "out"
    assert session.main(["--tiny", "--in-process", "--out", str(out), "--passes", "gemma,families"]) == 0
    log = (out / "log.txt").read_text()
    assert log.index("== gemma:") < log.index("== families:")
    rows = pd.read_csv(out / "bench.csv")
    assert rows["error"].isna().all(), rows["error"].dropna().tolist()
    assert set(rows["preset"]) == {"tiny-gemma3n", "tiny-af3", "tiny-granite-speech", "tiny-qwen3-omni"}
    assert sorted(path.name for path in out.iterdir()) == ["bench.csv", "env.txt", "gemma3n.md", "log.txt", "new_families.md"]
