"""AudioMarathon's analyses on a sweep of its ten tasks under its protocol: the three category
averages and the leaderboard's average, score against audio duration (buckets of the analyse_audio_duration
scripts) as a table and a figure for any task whose samples span two buckets, and the radar chart."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tests.support import task_fixtures
from kvprune.harness.cli import main
from kvprune.harness.sweep.analyses import DURATION_EDGES, bucket
from kvprune.harness.tasks.suites import get_suite

TASKS = get_suite("audiomarathon").tasks


def test_buckets_follow_the_analysis_scripts_edges():
    assert DURATION_EDGES[:3] == (0, 10, 20) and DURATION_EDGES[-2:] == (180, math.inf)
    assert [bucket(s) for s in (0.0, 9.99, 10.0, 29.5, 95.0, 180.0, 300.0)] == [
        "0-10 s", "0-10 s", "10-20 s", "28-30 s", "90-120 s", "180+ s", "180+ s"]
    assert bucket(float("nan")) is None


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("audiomarathon")
    with task_fixtures.clip_seconds(1.0):
        for writer in task_fixtures.WRITERS.values():
            writer(root)
    longer = sorted((root / "GTZAN").rglob("*.wav"))[0]
    task_fixtures.write_audio(longer, seconds=12.0)  # one GTZAN clip in the 10-20 s bucket, the others under 10 s
    out = tmp_path_factory.mktemp("out")
    assert main(["sweep", "--model", "demo", "--tasks", "audiomarathon", "--protocol", "audiomarathon", "--methods", "frame",
                 "--ratios", "0.5", "--data-root", str(root), "--out", str(out), "--device", "cpu", "--quiet",
                 "--max-new-tokens", "3"]) == 0
    return out


def test_category_averages_and_the_leaderboard_average(swept):
    summary = pd.read_csv(swept / "summary.csv")
    groups = pd.read_csv(swept / "breakdown.csv").query("field == 'groups'")
    for (method, ratio), rows in groups.groupby(["method", "ratio"]):
        runs = summary[(summary["method"] == method) & (summary["ratio"] == ratio)].set_index("task")["score"]
        scores = dict(zip(rows["value"], rows["score"]))
        for group, members in get_suite("audiomarathon").groups.items():
            assert scores[group] == pytest.approx(sum(runs[f"{t}@audiomarathon"] for t in members) / len(members)), group
    assert set(groups["value"]) == set(get_suite("audiomarathon").groups)
    report = (swept / "report.md").read_text()
    assert "#### audiomarathon: categories" in report and "| Speech Content Extraction |" in report


def test_score_against_duration_as_a_table_and_a_figure(swept):
    table = pd.read_csv(swept / "breakdown.csv").query("field == 'audio duration'")
    assert set(table["task"]) == {"gtzan@audiomarathon"}, "only GTZAN's samples span two buckets"
    baseline = table[table["method"] == "none"]
    assert baseline["value"].tolist() == ["0-10 s", "10-20 s"] and baseline["samples"].tolist()[1] == 1
    assert "#### gtzan@audiomarathon by audio duration" in (swept / "report.md").read_text()
    assert (swept / "demo_gtzan_audiomarathon_duration.png").stat().st_size > 0


def test_the_radar_chart_of_every_task(swept):
    radar = swept / "demo_radar.png"
    assert radar.stat().st_size > 0 and "![demo_radar](demo_radar.png)" in (swept / "report.md").read_text()
