"""AVI-Bench's fourteen tasks end to end: ``kvprune tasks`` lists them; a sweep of a tiny Qwen2.5-Omni
checkpoint over a fixture in the native layout (images, audio clips and videos with their sound
tracks, written by the test) runs every press without an error row, videos with their sound tracks
interleaved; the suite's stage scores come out in breakdown.csv and report.md; AVC without FENSE's
models is an error row that names them."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from transformers import Qwen2_5OmniProcessor

from tests.support import benchmark_fixtures
from kvprune import list_presses
from kvprune.harness.cli import main

from kvprune.harness.tasks.benchmarks.avibench.metrics import avibench_suite_levels
from kvprune.harness.tasks.suites import get_suite
from kvprune.harness.tasks.task import get_task
from tests.support.tiny_checkpoints import checkpoint
from tests.support.results import result_lines

AVIBENCH = get_suite("avibench").tasks
VISUAL = [name for name in AVIBENCH if name not in ("avibench_asqa", "avibench_amic", "avibench_avc")]
#: frames of 2 x 2 to 4 x 4 patches of 28 pixels instead of the processor's 128 to 768 (a CPU test's budget)
SMALL_VIDEO = {"size": {"shortest_edge": 4 * 28 * 28, "longest_edge": 16 * 28 * 28}}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("avibench")
    benchmark_fixtures.avibench_asqa(root)
    benchmark_fixtures.avibench_amic(root)
    benchmark_fixtures.avibench_visual(root)
    return root


@pytest.fixture(scope="module")
def omni(tmp_path_factory):
    """A tiny Qwen2.5-Omni checkpoint whose feature extractor pads audio to 30 s (the checkpoints' to
    300 s, which is most of this CPU test's time), small video frames."""
    folder = checkpoint("qwen2_5_omni", tmp_path_factory.mktemp("omni"))
    settings = json.loads((folder / "processor_config.json").read_text())
    settings["feature_extractor"].update(chunk_length=30, n_samples=30 * 16_000, nb_max_frames=3000)
    (folder / "processor_config.json").write_text(json.dumps(settings))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Qwen2_5OmniProcessor, "videos_kwargs", SMALL_VIDEO)
        yield folder


def sweep(model, data_root, out, tasks, methods, *extra) -> list[str]:
    return ["sweep", "--model", str(model), "--tasks", ",".join(tasks), "--methods", methods, "--ratios", "0.5",
            "--data-root", str(data_root), "--out", str(out), "--device", "cpu", "--quiet", "--no-plots",
            "--max-new-tokens", "2", "--limit", "1", *extra]


def test_kvprune_tasks_lists_the_fourteen(capsys):
    assert main(["tasks"]) == 0
    listing = capsys.readouterr().out
    abbreviations = {"ASQA", "VSQA_I", "VSQA_V", "AVSQA", "AMIC", "VMIC", "AVL", "AVM", "VAR", "AVR", "AVC", "AVH", "VAH",
                     "AVQA", "AVLG"}  # the paper's 14, VSQA released as two halves
    assert len(AVIBENCH) == 15
    for name in AVIBENCH:
        assert name in listing
    assert {name.removeprefix("avibench_").upper() for name in AVIBENCH} == abbreviations


@pytest.fixture(scope="module")
def swept(omni, data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("swept")
    assert main(sweep(omni, data_root, out, [*VISUAL, "avibench_asqa", "avibench_amic"], ",".join(list_presses()))) == 0
    return out


def test_every_press_runs_on_every_task_without_an_error_row(swept, data_root):
    rows = result_lines(swept)
    assert [r["error"] for r in rows if r["error"]] == []
    assert {r["method"] for r in rows} == {"none", *list_presses()}
    for name in [*VISUAL, "avibench_asqa", "avibench_amic"]:
        samples = get_task(name).load(data_root, limit=1)
        scored = [r for r in rows if r["task"] == name and r.get("pass") is None]  # not the timing subset's repeats
        assert len(scored) == len(samples) * (1 + len(list_presses()))
    silent = {"avibench_vsqa_i", "avibench_vsqa_v", "avibench_vmic"}  # images, or a video without a sound track
    for row in rows:
        assert (row["audio_tokens"] == 0) == (row["task"] in silent), row["task"]
        if row["method"] in list_presses(kind="token") and row["audio_tokens"]:
            assert row["kept_tokens"] < row["audio_tokens"], f"{row['task']} {row['sample_id']}: audio was pruned"
    video = [r for r in rows if r["task"] == "avibench_avqa" and r["method"] == "none"]
    assert all(r["audio_seconds"] >= 4.0 for r in video), "a video's sound track reached the model"


def test_stage_scores_in_the_breakdown_and_the_report(swept):
    summary = pd.read_csv(swept / "summary.csv")
    levels = pd.read_csv(swept / "breakdown.csv").query("field == 'levels'")
    baseline = levels[levels["method"] == "none"].set_index("value")["score"]
    # AVC did not run: the understanding stage, Overall and L1 cannot be formed
    assert set(baseline.index) == {"sensation", "perception", "reasoning"}
    scores = summary[summary["method"] == "none"].set_index("task")["score"]
    perception = [scores[f"avibench_{t}"] for t in ("amic", "vmic", "avl", "avm")]
    assert baseline["perception"] == pytest.approx(sum(perception) / 4)
    report = (swept / "report.md").read_text()
    assert "#### avibench: levels" in report and "L2 (Modality-Adaptive)" in report and "not computed" in report


def test_avc_without_fense_models_is_an_error_naming_them(omni, data_root, tmp_path, monkeypatch):
    monkeypatch.delenv("KVPRUNE_FENSE_DIR", raising=False)
    assert main(sweep(omni, data_root, tmp_path / "out", ["avibench_avc"], "fastv")) == 1
    rows = result_lines(tmp_path / "out")
    assert rows and all(r["error"] for r in rows)
    for needed in ("sentence-transformers/paraphrase-TinyBERT-L6-v2", "bert-base-uncased",
                   "echecker_clotho_audiocaps_base.ckpt", "KVPRUNE_FENSE_DIR"):
        assert needed in rows[0]["error"]


def _rows(task: str, replies: dict[str, str]) -> list[dict]:
    """Result rows of entries with the given replies, in order (what the levels read)."""
    return [{"parsed": reply, "meta": {"entry": {"id": entry_id, "task": task, "input": {"question": {
        "text": "q", "options": "options_yes_no"}}, "output": {"question_answer": "yes"}}}} for entry_id, reply in replies.items()]


def test_levels_pool_vsqa_and_average_stages():
    rows = {"VSQA_I": _rows("VSQA_I", {"1": "yes", "2": "no"}), "VSQA_V": _rows("VSQA_V", {"1": "yes", "pre_1": "no"})}
    scores = {"ASQA": 40.0, "AVSQA": 10.0, "AMIC": 50.0, "VMIC": 30.0, "AVL": 20.0, "AVM": 60.0, "VAR": 10.0, "AVR": 20.0,
              "AVC": 30.0, "AVH": 70.0, "VAH": 50.0, "AVQA": 40.0, "AVLG": 20.0, "VSQA_I": 50.0, "VSQA_V": 0.0}
    levels = avibench_suite_levels(rows, scores)
    # pooled VSQA: I-1 right, I-2 wrong, V-1 right but its pre-check wrong: 1 of 3 formal entries right
    assert levels["sensation"] == pytest.approx((40 + 100 * round(1 / 3, 5) + 10) / 3)  # the evaluator rounds to 5 places
    assert levels["perception"] == pytest.approx(40.0) and levels["understand"] == pytest.approx(20.0)
    assert levels["reasoning"] == pytest.approx(45.0)
    stages = [levels[s] for s in ("sensation", "perception", "understand", "reasoning")]
    assert levels["Overall"] == pytest.approx(sum(stages) / 4) and levels["L1"] == pytest.approx((40 + 20 + 45) / 3)
