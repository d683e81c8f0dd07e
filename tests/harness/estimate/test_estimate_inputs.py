"""What ``kvprune estimate`` times and prices: with no option the demo sweep ``kvprune sweep`` runs, any
family's checkpoint folder, bad input refused before any work (exit 2), prompts of their own per
sample (nothing shared across samples), and answers of planned lengths (a batch decodes as long as
its longest; from the data's gold answers, or from what the task's answers are)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from kvprune.harness.cli import main
from kvprune.harness.demo import DEMO_MODEL_DIR
from kvprune.harness.demo.default import DEMO_TASKS
from kvprune.harness.demo.suite import demo_suite
from kvprune.harness.estimate import answers
from kvprune.harness.estimate import estimate as estimate_module
from kvprune.harness.estimate.report_rows import FIXED
from kvprune.harness.estimate.synthetic import SyntheticPrompts
from kvprune.harness.sweep.config import SweepConfig
from kvprune.harness.sweep.execute import Executor
from kvprune.harness.tasks.task import get_task
from kvprune.models.loading import load_model
from tests.support.tiny_checkpoints import checkpoint

QUICK = ["--repeats", "1", "--samples-per-task", "1", "--batches-per-task", "1", "--timed-ratios", "2", "--methods",
         "fastv", "--ratios", "0.5", "--device", "cpu", "--quiet"]


class Captured(Exception):
    pass


def test_no_option_prices_the_demo_sweep_kvprune_sweep_runs(monkeypatch, tmp_path):
    seen = {}

    def capture(config, **kwargs):
        seen["config"] = config
        raise Captured

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(estimate_module, "run_estimate", capture)
    with pytest.raises(Captured):
        main(["estimate"])
    config, sweep = seen["config"], SweepConfig(models=["demo"], tasks=DEMO_TASKS, data_root=demo_suite())
    assert config.models == ["demo"] and config.tasks == DEMO_TASKS and config.data_root == demo_suite()
    assert config.preset is None and str(config.out) == "kvprune-results/estimate"
    for name in ("methods", "ratios", "batch_size", "timing_samples", "reuse_encoder", "cache", "encoder"):
        assert getattr(config, name) == getattr(sweep, name), name


@pytest.mark.parametrize("model", ["demo", str(DEMO_MODEL_DIR)])
def test_the_demo_model_by_name_or_folder_is_priced_on_its_suite(model, tmp_path):
    out = tmp_path / "estimate"
    out.mkdir()
    (out / "timed.csv").write_text("kind,task\ncall,another estimate's\n")  # no estimate.csv: not resumed
    argv = ["estimate", "--model", model, "--tasks", "demo_pitch", "--data-root", str(demo_suite()), "--limit", "2",
            "--out", str(out), *QUICK]
    assert main(argv) == 0
    table = pd.read_csv(out / "estimate.csv")
    row = table[(table["task"] == "demo_pitch") & (table["mode"] == "sweep")].iloc[0]
    assert row["samples"] == 2 and row["samples_source"] == "its data" and row["seconds"] > 0
    assert row["answer_tokens"] == 2, "a letter and the end token, counted by the demo's tokenizer"
    assert (table["task"] == FIXED).any()
    # what the figures rest on: every call and batch timed, the calls of a batch inside its wall time
    timed = pd.read_csv(out / "timed.csv")
    calls, batches = timed[timed["kind"] == "call"], timed[timed["kind"] == "batch"]
    assert set(timed["task"]) == {"demo_pitch"}
    assert set(calls["mode"]) == set(table.loc[table["task"] == "demo_pitch", "mode"]) | {"batch1"}  # + timing subset
    assert (calls["seconds"] > 0).all() and (calls["generated"] >= 1).all() and len(batches) >= 2
    inside = calls.groupby(["mode", "unit", "repeat"])["seconds"].sum()
    walls = batches.set_index(["mode", "unit", "repeat"])["seconds"]
    assert set(inside.index) == set(walls.index) and (inside <= walls.loc[inside.index]).all()
    # each batch made the runs it called, and one run's own work (a gap between calls) fits in what they leave
    made = calls.groupby(["mode", "unit", "repeat"])["run"].nunique()
    assert (batches.set_index(["mode", "unit", "repeat"])["runs"].loc[made.index] == made).all()
    between = batches.set_index(["mode", "unit", "repeat"])["between_runs"].loc[inside.index]
    assert (between > 0).all() and (between * (made - 1) <= walls.loc[inside.index] - inside).all()
    assert (batches["host_loop_ns"] > 0).all()  # the host's speed before each batch


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni", "qwen2_audio", "audioflamingo3", "phi4_multimodal",
                                    "voxtral"])
def test_a_checkpoint_folder_of_every_family_is_priced_on_prompts_its_processor_builds(family, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    checkpoint(family, folder)
    out = tmp_path / "estimate"
    argv = ["estimate", "--model", str(folder), "--tasks", "vesus", "--limit", "2", "--batch-size", "2",
            "--max-new-tokens", "3", "--modes", "sweep", "--timing-samples", "1", "--out", str(out), *QUICK]
    assert main(argv) == 0
    row = pd.read_csv(out / "estimate.csv").query("task == 'vesus' and mode == 'sweep'").iloc[0]
    assert row["samples_source"].startswith("published") and row["seconds"] > 0


@pytest.mark.parametrize("argv, words", [
    (["--model", "./no/such/folder"], "not found"),
    (["--model", "demo,demo"], "one model"),
    (["--preset", "no-such-preset", "--tasks", "gtzan"], "unknown preset"),
    (["--preset", "tiny-omni"], "no task"),
    (["--preset", "tiny-omni", "--model", "demo", "--tasks", "gtzan"], "not both"),
    (["--preset", "tiny-omni", "--tasks", "gtzan", "--modes", "batch1"], "modes"),
    (["--preset", "tiny-omni", "--tasks", "gtzan", "--data-root", "no/such/dir"], "not a directory"),
])
def test_bad_input_is_refused_before_any_work(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(estimate_module, "run_estimate", lambda *a, **k: pytest.fail("the estimate started"))
    assert main(["estimate", *argv, "--out", str(tmp_path / "e"), "--quiet"]) == 2
    assert words in capsys.readouterr().err


def test_every_sample_has_prompts_of_its_own_even_at_equal_lengths(tmp_path):
    """GTZAN's published clips are all 240 s: no two samples may share a prompt, so nothing (an encoder
    output, a prefill) is shared across samples."""
    config = SweepConfig(models=["demo"], tasks=["gtzan"], data_root=tmp_path, limit=3)
    task, source = get_task("gtzan"), SyntheticPrompts()
    samples = source.samples(task, config)
    planned = [source.planned(task, sample, None) for sample in samples]
    assert {p.seconds for p in planned} == {240.0} and len({p.input_hash for p in planned}) == 3
    loaded = load_model(DEMO_MODEL_DIR, device="cpu")
    features = [source.prepare(loaded, task, p, "split")["inputs"]["input_features"] for p in planned]
    assert features[0].shape == features[1].shape and not torch.equal(features[0], features[1])
    assert torch.equal(features[0], source.prepare(loaded, task, planned[0], "split")["inputs"]["input_features"])


def test_planned_answers_follow_what_the_task_s_answers_are():
    assert answers.published_answer_tokens("letter", 240.0) == 2
    four_minutes = answers.published_answer_tokens("transcript", 240.0)
    assert 800 <= four_minutes <= 900 and four_minutes < get_task("librispeech").max_new_tokens
    assert answers.published_answer_tokens("transcript", 60.0) < four_minutes / 3
    assert answers.gold_answer_tokens("one two three four five six seven eight nine ten") == 14  # 13 + the end
    loaded = load_model(DEMO_MODEL_DIR, device="cpu")
    assert answers.gold_answer_tokens("A", loaded.processor.tokenizer) == 2


def test_a_batch_decodes_as_long_as_its_longest_planned_answer_and_each_row_is_cut_to_its_own(tmp_path):
    loaded = load_model(DEMO_MODEL_DIR, device="cpu")
    executor = Executor(loaded, "engine")
    task, source = get_task("vesus"), SyntheticPrompts()
    samples = source.samples(task, SweepConfig(models=["demo"], tasks=["vesus"], data_root=tmp_path, limit=2))
    inputs = [source.prepare(loaded, task, source.planned(task, s, None), "split")["inputs"] for s in samples]
    generation = executor.generate(inputs, None, max_new_tokens=40, answers=[3, 20])
    assert [sample.new_tokens for sample in generation.samples] == [3, 20]
    assert generation.timing.new_tokens == 33 == executor.engine.tokens_generated(20, 40), "stops read every 16 steps"
    short = executor.generate(inputs[:1], None, max_new_tokens=10, answers=[2])
    assert short.timing.new_tokens == 2 and short.samples[0].new_tokens == 2, "a letter and its end: read after step 1"
    five = executor.generate(inputs[:1], None, max_new_tokens=40, answers=[6])
    assert five.timing.new_tokens == 9 == executor.engine.tokens_generated(6, 40), "to the read after step 8"
