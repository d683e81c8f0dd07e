"""AudioMarathon's analyses on a sweep of its ten tasks under its protocol: the three category
averages and the leaderboard's average, score against audio duration (each task on its own
analyse_audio_duration script's buckets: tests/harness/tasks/benchmarks/test_audiomarathon_durations.py) as
a table and a figure for any task whose samples span two buckets, the suite's view of its tasks
together on analyse_all.py's buckets, and the radar chart."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.support import task_fixtures
from tests.support.results import result_lines
from kvprune.harness.cli import main
from kvprune.harness.sweep.store import recorded_tasks
from kvprune.harness.sweep.summary import scoring_passes
from kvprune.harness.tasks.suites import get_suite

TASKS = get_suite("audiomarathon").tasks
LONGER = ("GTZAN", "DESED")  # one clip of each 12 s long, every other clip 1 s


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = task_fixtures.every_task(tmp_path_factory.mktemp("audiomarathon"))
    for folder in LONGER:
        task_fixtures.write_audio(sorted((root / folder).rglob("*.wav"))[0], seconds=12.0)
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
    table = pd.read_csv(swept / "breakdown.csv").query("field == 'audio duration' and task != 'audiomarathon'")
    assert set(table["task"]) == {"gtzan@audiomarathon", "desed@audiomarathon"}, "only their samples span two buckets"
    baseline = table[table["method"] == "none"].groupby("task")
    # 1 s and 12 s: GTZAN.py's buckets are 0-10 s and 10-20 s, DESED.py's 0-5 s and 10-15 s
    assert baseline["value"].agg(list).to_dict() == {"gtzan@audiomarathon": ["0-10s", "10-20s"],
                                                    "desed@audiomarathon": ["0-5s", "10-15s"]}
    assert baseline["samples"].agg(list).to_dict()["gtzan@audiomarathon"][1] == 1
    report = (swept / "report.md").read_text()
    assert "#### gtzan@audiomarathon by audio duration" in report and "#### desed@audiomarathon by audio duration" in report
    assert (swept / "demo_gtzan_audiomarathon_duration.png").stat().st_size > 0


def test_the_suites_tasks_together_by_duration(swept):
    """analyse_all.py's buckets over the ten tasks' samples: 0-2 s holds every 1 s clip, 10-15 s the two
    12 s ones; each bucket scores the mean of its tasks' primary scores on their samples in it."""
    table = pd.read_csv(swept / "breakdown.csv").query("field == 'audio duration' and task == 'audiomarathon'")
    rows, _ = scoring_passes(pd.DataFrame(result_lines(swept)))
    tasks = recorded_tasks(swept)
    for (method, ratio), view in table.groupby(["method", "ratio"]):
        assert view["value"].tolist() == ["0-2s", "10-15s"]
        run = rows[(rows["method"] == method) & (rows["ratio"] == ratio)]
        for bucket, in_bucket in (("0-2s", run["audio_seconds"] < 2), ("10-15s", run["audio_seconds"] >= 10)):
            chosen = run[in_bucket]
            scores = {tasks[name].abbreviation: tasks[name].summarize(part.to_dict("records"))[tasks[name].primary_metric]
                      for name, part in chosen.groupby("task")}
            cell = view.set_index("value").loc[bucket]
            assert cell["samples"] == len(chosen) and cell["tasks"] == ", ".join(sorted(scores))
            assert cell["score"] == pytest.approx(sum(scores.values()) / len(scores))
        assert view.set_index("value").loc["10-15s", "tasks"] == "MC, SED"
    report = (swept / "report.md").read_text()
    assert "#### audiomarathon by audio duration (mean primary score)" in report
    assert (swept / "demo_audiomarathon_duration.png").stat().st_size > 0


def test_the_radar_chart_of_every_task(swept):
    radar = swept / "demo_radar.png"
    assert radar.stat().st_size > 0 and "![demo_radar](demo_radar.png)" in (swept / "report.md").read_text()
