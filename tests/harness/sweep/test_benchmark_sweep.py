"""``kvprune sweep`` of the demo model over a small fixture of every seed benchmark (two presses, two
ratios): every run recorded with its item's metadata, the official metrics in summary.csv, the
breakdowns and STAR-Bench's Final MA in breakdown.csv and report.md; the audiomarathon protocol's
keep rule in the kept counts; bad items recorded as their samples' errors while the rest runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kvprune.harness.cli import main
from kvprune.harness.sweep.config import SweepConfig
from kvprune.harness.sweep.plan import load_tasks, runs_of

from kvprune.harness.tasks.suites import expand_suites
from kvprune.harness.tasks.task import get_task
from tests.support import benchmark_fixtures, task_fixtures
from tests.support.paths import REPO
from tests.support.results import result_lines

TASKS = ["starbench", "mmau", "mmar", "avibench_asqa", "avibench_amic", "staudioqa_a", "staudioqa_c"]
RUNS = 5  # the baseline, then 2 methods x 2 ratios


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("benchmarks")
    for writer in (benchmark_fixtures.starbench, benchmark_fixtures.mmau, benchmark_fixtures.mmar,
                   benchmark_fixtures.avibench_asqa, benchmark_fixtures.avibench_amic, benchmark_fixtures.staudioqa):
        writer(root)
    return root


def sweep(data_root, out, tasks, *extra) -> list[str]:
    return ["sweep", "--model", "demo", "--tasks", ",".join(tasks), "--methods", "fastv,frame", "--ratios", "0.3,0.7",
            "--data-root", str(data_root), "--out", str(out), "--device", "cpu", "--quiet", "--no-plots",
            "--max-new-tokens", "4", "--no-reuse-encoder", "--no-share-layers", *extra]


@pytest.fixture(scope="module")
def swept(data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("swept")
    assert main(sweep(data_root, out, TASKS, "--limit", "1")) == 0
    return out


def test_every_run_of_every_benchmark_is_recorded_with_its_metadata(swept, data_root):
    rows = result_lines(swept)
    names = expand_suites(TASKS)
    samples = {name: get_task(name).load(data_root, limit=1) for name in names}
    assert len(rows) == RUNS * sum(len(s) for s in samples.values())
    assert all(r["error"] is None for r in rows)
    for name, expected in samples.items():
        mine = [r for r in rows if r["task"] == name and r["method"] == "none"]
        assert [(r["sample_id"], r["position"], r["meta"]) for r in mine] == [(s.id, s.position, s.meta) for s in expected]
    pc = next(r for r in rows if r["task"] == "starbench_pc")
    assert {"category", "sub-category", "run", "runs"} <= set(pc["meta"])


def test_summary_breakdowns_and_the_final_ma(swept):
    summary = pd.read_csv(swept / "summary.csv")
    assert set(summary["task"]) == set(expand_suites(TASKS))
    assert dict(zip(summary["task"], summary["metric"])) == {
        "starbench_pc": "starbench_aa", "starbench_sr": "starbench_aa", "starbench_tr": "starbench_aa",
        "mmau": "string_match", "mmar": "string_match", "avibench_asqa": "asqa_accuracy",
        "avibench_amic": "amic_average", "staudioqa_a": "st_answer_accuracy", "staudioqa_c": "st_family_average",
    }
    table = pd.read_csv(swept / "breakdown.csv")
    fields = {task: set(rows["field"]) for task, rows in table.groupby("task")}
    assert fields["starbench_pc"] == {"category", "sub-category"} and fields["mmau"] <= {"task", "difficulty", "sub-category"}
    assert fields["starbench"] == {"suite"}
    ma = table[table["task"] == "starbench"].set_index(["method", "ratio"])
    parts = summary[summary["task"].str.startswith("starbench_")].groupby(["method", "ratio"])["starbench_aa"].mean()
    assert len(ma) == RUNS and (ma["value"] == "Final MA").all()
    assert ma["starbench_aa"].sort_index().tolist() == pytest.approx(parts.sort_index().tolist())
    report = (swept / "report.md").read_text()
    assert "#### starbench_pc by sub-category (starbench_aa)" in report and "#### starbench: Final MA over its tasks" in report
    assert "| value | samples | baseline | fastv 0.3 | fastv 0.7 | frame 0.3 | frame 0.7 |" in report
    assert "AVI-Bench's LLM refine step is not run" in report and "PROVISIONAL" in report


def test_the_audiomarathon_protocol_counts_kept_tokens_its_way(tmp_path):
    with task_fixtures.clip_seconds(1.0):  # 25 audio tokens per clip
        task_fixtures.had(tmp_path / "data", real=1, fake=1)
    out = tmp_path / "out"
    assert main(sweep(tmp_path / "data", out, ["had"], "--protocol", "audiomarathon")) == 0
    rows = result_lines(out)
    assert {r["task"] for r in rows} == {"had@audiomarathon"} and all(r["error"] is None for r in rows)
    for row in rows:
        if row["method"] != "none":  # 25 tokens: int(17.5) = 17 at 0.3, int(7.5) = 7 at 0.7 (round would keep 18, 8)
            assert row["kept_tokens"] == max(1, int(row["audio_tokens"] * (1 - row["ratio"])))
    assert {r["reference"] for r in rows} == {"real", "fake"}
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["metric"]) == {"audiomarathon_f1_fake"}


def test_bad_items_are_their_samples_errors_and_the_sweep_goes_on(data_root, tmp_path):
    """A missing audio file (STAR-Bench), a record without its answer (MMAU) and a stereo scene where
    the task needs first-order ambisonics (ST-AudioQA): each is recorded for its sample, naming the
    item and the fix; every other sample runs, and the sweep exits with 1 (some runs failed)."""
    root = tmp_path / "data"
    benchmark_fixtures.starbench(root)
    items = benchmark_fixtures.mmau(root)
    benchmark_fixtures.staudioqa(root)
    (root / "STAR-Bench" / "starbench_audios" / "pc" / "d1.wav").unlink()
    del items[1]["answer"]
    (root / "MMAU" / "mmau-test-mini.json").write_text(json.dumps(items))
    benchmark_fixtures.write_channels(root / "ST-AudioQA" / "audio" / "s2.wav", channels=2)
    out = tmp_path / "out"
    args = sweep(root, out, ["starbench_pc", "mmau", "staudioqa_a"])
    args[args.index("--methods") + 1], args[args.index("--ratios") + 1] = "frame", "0.5"
    assert main(args) == 1
    rows = result_lines(out)
    failed = {(r["task"], r["sample_id"]): r["error"] for r in rows if r["error"]}
    # an item that cannot be read is one sample (its runs are unknown), recorded for each method and ratio
    assert set(failed) == {("starbench_pc", "pc_dir_1"), ("mmau", "m-2"), ("staudioqa_a", "a3"), ("staudioqa_a", "a4")}
    assert len(rows) - len(failed) * 2 == 2 * (9 + 2 + 2)
    assert "foundation_perception.json item 3 (sample pc_dir_1): audio file not found" in failed[("starbench_pc", "pc_dir_1")]
    assert "Expected layout: <data_root>/STAR-Bench/meta_info/foundation_perception.json" in failed[("starbench_pc", "pc_dir_1")]
    assert "mmau-test-mini.json item 1 (sample m-2) has no field 'answer'; add it to the item" in failed[("mmau", "m-2")]
    assert "s2.wav has 2 channel(s), but the task's channel policy foa_omni (acn order) needs 4" in failed[("staudioqa_a", "a3")]


@pytest.mark.parametrize("path", sorted((REPO / "bench_configs").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_sweep_config_builds_with_its_tasks(path, tmp_path):
    config = SweepConfig.build(path, data_root=tmp_path)
    tasks = load_tasks(config.tasks, config.protocol)
    assert tasks and runs_of(config)
    assert len({task.benchmark for task in tasks}) == 1, "one benchmark suite per sweep"
