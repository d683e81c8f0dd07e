"""Sweeps at scale: batched samples, the audio encoder's output reused by every run of a sample, the
timing subset, and resuming in the middle of a batch (CPU, the demo model and tiny checkpoints)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from kvprune import FastVPress, Generator
from kvprune.generation.encoder_reuse import EncoderReuse, reuse_audio_encoder
from kvprune.harness.cli import main
from kvprune.harness.sweep import samples as samples_module
from kvprune.harness.sweep.source import Checkpoints
from kvprune.harness.sweep.store import TIMING_PASS
from tests.support import task_fixtures
from tests.support.helpers import NO_STOP, model
from tests.support.tiny_checkpoints import qwen2_audio_checkpoint
from tests.support.tiny_models import FAMILIES
from tests.support.results import line_key, result_lines

COMPARED = ["task", "method", "ratio", "sample_id", "output", "parsed", "kept_tokens", "error"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return task_fixtures.gtzan_and_had(tmp_path_factory.mktemp("data"), real=4, fake=3)


def sweep(out: Path, *extra: str, data_root: Path | None = None, model_name: str = "demo",
          tasks: str = "had,gtzan") -> list[str]:
    args = ["sweep", "--model", model_name, "--methods", "fastv,frame+knorm", "--ratios", "0.3,0.7", "--out", str(out),
            "--device", "cpu", "--quiet", "--no-plots", "--max-new-tokens", "4", *extra]
    if data_root is not None:
        args += ["--tasks", tasks, "--data-root", str(data_root)]
    return args


def scoring(out: Path) -> dict[tuple, dict]:
    return {tuple(row[k] for k in COMPARED[:4]): row for row in result_lines(out) if row.get("pass") is None}


def same_answers(a: Path, b: Path) -> None:
    rows_a, rows_b = scoring(a), scoring(b)
    assert rows_a.keys() == rows_b.keys() and rows_a
    for key, row in rows_a.items():
        assert {k: row[k] for k in COMPARED} == {k: rows_b[key][k] for k in COMPARED}, key


@pytest.fixture(scope="module")
def batch_one(data_root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("batch1")
    assert main(sweep(out, "--no-reuse-encoder", "--no-share-layers", data_root=data_root)) == 0
    return out


def test_batches_of_four_give_batch_ones_answers_and_say_how_they_ran(data_root, batch_one, tmp_path):
    out = tmp_path / "batch4"
    assert main(sweep(out, "--batch-size", "4", "--timing-samples", "2", data_root=data_root)) == 0
    same_answers(batch_one, out)
    rows = result_lines(out)
    scored = [r for r in rows if r.get("pass") is None]
    samples = {task: len({r["sample_id"] for r in scored if r["task"] == task}) for task in ("had", "gtzan")}
    for (task, method, ratio), size in {(r["task"], r["method"], r["ratio"]): None for r in scored}.items():
        calls = {r["batch_id"]: r["batch_size"] for r in scored if (r["task"], r["method"], r["ratio"]) == (task, method, ratio)}
        assert sorted(calls.values(), reverse=True) == [min(4, samples[task] - 4 * i) for i in range(len(calls))]
    assert all("prefill_s" not in r and r["batch_prefill_s"] > 0 for r in scored), "batched rows time the batch"
    runs = 1 + 2 * 2
    timing = [r for r in rows if r.get("pass") == TIMING_PASS]
    assert len(timing) == 2 * 2 * runs and all(r["batch_size"] == 1 and r["prefill_s"] > 0 for r in timing)
    assert all(r["encoder_reused"] for r in scored if r["method"] != "none"), "every run after a batch's first reuses"
    assert not any(r["encoder_reused"] for r in timing), "the timing subset shares nothing"
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["samples"] == summary["task"].map(samples)).all()
    assert (summary["timed_samples"] <= 2).all() and set(summary["timing_source"]) == {"timing subset"}
    assert (summary["samples_per_s"] > 0).all() and (summary["batch_identical"] == 1.0).all()
    report = (out / "report.md").read_text()
    assert "## How the samples ran" in report and "audio encoder output" in report and "timing subset" in report


def test_reusing_the_encoder_changes_no_answer(data_root, batch_one, tmp_path):
    out = tmp_path / "reuse"
    assert main(sweep(out, "--timing-samples", "0", data_root=data_root)) == 0
    same_answers(batch_one, out)
    assert any(r["encoder_reused"] for r in result_lines(out))


def test_the_demo_batched_gives_the_answers_of_batch_one(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPRUNE_CACHE", str(tmp_path / "cache"))
    one, four = tmp_path / "one", tmp_path / "four"
    assert main(sweep(one, "--limit", "5", "--no-reuse-encoder", "--no-share-layers")) == 0
    assert main(sweep(four, "--limit", "5", "--batch-size", "4")) == 0
    same_answers(one, four)


def test_a_sweep_s_smaller_batches_decode_at_its_batch_size_and_the_timing_pass_alone(tmp_path, monkeypatch):
    """The scoring pass's last batch of a task (5 samples at batch 4: a batch of 1) asks the engine for the pass's
    4 rows, so that on a GPU it decodes on the full batches' compiled step; the timing pass runs one sample alone."""
    monkeypatch.setenv("KVPRUNE_CACHE", str(tmp_path / "cache"))
    calls = []
    generate = Generator.generate

    def recording(self, inputs, **kwargs):
        calls.append((len(inputs), kwargs.get("decode_rows")))
        return generate(self, inputs, **kwargs)

    monkeypatch.setattr(Generator, "generate", recording)
    assert main(sweep(tmp_path / "out", "--limit", "5", "--batch-size", "4", "--timing-samples", "1")) == 0
    assert {call for call in calls if call[1] == 4} == {(4, 4), (1, 4)}
    assert {call for call in calls if call[1] != 4} == {(1, 1)}, "the timing pass: one sample, alone"


def test_a_tiny_qwen2_audio_checkpoint_batched_gives_batch_ones_answers(data_root, tmp_path):
    folder = qwen2_audio_checkpoint(tmp_path / "qwen2_audio")
    one, four = tmp_path / "one", tmp_path / "four"
    assert main(sweep(one, "--no-reuse-encoder", "--no-share-layers", data_root=data_root, model_name=str(folder), tasks="had")) == 0
    assert main(sweep(four, "--batch-size", "4", data_root=data_root, model_name=str(folder), tasks="had")) == 0
    same_answers(one, four)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_decodes_samples_prefilled_apart_as_each_alone(family):
    """What a sweep batch is, on every family's tiny model: each sample its own prefill, one decoding."""
    m = model(family, "sdpa")
    rows = [[("text", 3), ("audio", 12), ("text", 4)], [("text", 6), ("audio", 8), ("text", 2)], [("audio", 16), ("text", 3)]]
    batches = [FAMILIES[family].inputs([row], seed=i) for i, row in enumerate(rows)]
    generator = Generator(m)
    press = FastVPress(layer=2, ratio=0.5)
    together = generator.generate(batches, max_new_tokens=6, press=press, **NO_STOP).new_tokens
    alone = [generator.generate(b, max_new_tokens=6, press=press, **NO_STOP).new_tokens for b in batches]
    assert torch.equal(together, torch.cat(alone))


def test_the_sweep_s_engine_lays_unpruned_prompts_out_as_its_token_presses_lay_out_theirs(tmp_path):
    """The executor's engine splits unpruned caches at the K of the sweep's token presses, so that the unpruned
    runs decode on their compiled step (one compilation fewer on a GPU)."""
    from kvprune.harness.demo import DEMO_MODEL_DIR
    from kvprune.harness.sweep.execute import Executor
    from kvprune.harness.sweep.plan import checked_presses, runs_of
    from kvprune.harness.sweep.config import SweepConfig
    from kvprune.models.loading import load_model

    loaded = load_model(DEMO_MODEL_DIR, device="cpu")
    config = SweepConfig(models=["demo"], tasks=["demo_pitch"], data_root=tmp_path, methods=["fastv", "frame"], layer=3)
    executor = Executor(loaded, "engine", checked_presses(runs_of(config)).values())
    assert executor.engine.split_unpruned_at == 3


def test_a_reused_encoder_output_is_the_very_tensor_and_runs_once_per_input():
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs([[("text", 3), ("audio", 12), ("text", 4)]])
    encoder, _ = FAMILIES[family].family.audio_encoder(m)
    calls = []  # computations of the encoder: its first submodule runs only when the encoder does
    handle = next(encoder.children()).register_forward_hook(lambda *_: calls.append(1))
    try:
        with torch.no_grad():
            plain = [m(**inputs).logits for _ in range(2)]
            del calls[:]
            with reuse_audio_encoder(m) as reuse:
                reused = [m(**inputs).logits for _ in range(3)]
                other = FAMILIES[family].inputs([[("text", 3), ("audio", 12), ("text", 4)]], seed=5)
                m(**other)
    finally:
        handle.remove()
    assert len(calls) == 2 and (reuse.hits, reuse.misses) == (2, 2)  # the first input once, then the other
    assert all(torch.equal(logits, plain[0]) for logits in reused)
    assert "forward" not in encoder.__dict__, "the encoder is left as it was"


def test_reuse_keeps_at_most_its_memory_bound():
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    with torch.no_grad(), reuse_audio_encoder(m, EncoderReuse(max_bytes=1)) as reuse:
        for seed in range(3):
            m(**FAMILIES[family].inputs([[("audio", 12), ("text", 2)]], seed=seed))
        assert len(reuse._calls) == 1, "the least recently used go first; the last call stays"


def test_a_sweep_killed_in_the_middle_of_a_batch_resumes_with_nothing_lost_or_doubled(data_root, batch_one, tmp_path,
                                                                                      monkeypatch):
    out = tmp_path / "killed"
    appended, original = [], samples_module.ResultStore.append

    def append_then_stop(store, row):
        original(store, row)
        appended.append(row)
        if len(appended) == 10:  # the third row of the second run of the first batch of 4
            raise KeyboardInterrupt

    monkeypatch.setattr(samples_module.ResultStore, "append", append_then_stop)
    assert main(sweep(out, "--batch-size", "4", "--timing-samples", "0", data_root=data_root)) == 130
    monkeypatch.setattr(samples_module.ResultStore, "append", original)
    assert len(result_lines(out)) == 10
    assert main(sweep(out, "--batch-size", "4", "--timing-samples", "0", data_root=data_root)) == 0
    rows = result_lines(out)
    assert len(rows) == len({line_key(r) for r in rows}), "no run recorded twice"
    same_answers(batch_one, out)


def test_a_batch_whose_call_fails_is_retried_one_sample_at_a_time(tmp_path, monkeypatch):
    """One sample that breaks generation costs only its own rows; its batch mates run alone."""
    monkeypatch.setenv("KVPRUNE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "one_bad"
    broken, prepared = set(), []
    real_prepare, real_generate = Checkpoints.prepare, samples_module.Executor.generate

    def prepare(source, loaded, task, planned, policy):
        result = real_prepare(source, loaded, task, planned, policy)
        prepared.append(planned.sample.id)
        if len(prepared) == 3:
            broken.add(id(result["inputs"]))
        return result

    def generate(executor, inputs, press, max_new_tokens, answers=None, batch_size=None):
        if any(id(batch) in broken for batch in inputs):
            raise RuntimeError("this sample breaks the model")
        return real_generate(executor, inputs, press, max_new_tokens, answers, batch_size)

    monkeypatch.setattr(Checkpoints, "prepare", prepare)
    monkeypatch.setattr(samples_module.Executor, "generate", generate)
    assert main(sweep(out, "--limit", "4", "--batch-size", "4", "--timing-samples", "0", "--tasks", "demo_count")) == 1
    rows = [r for r in result_lines(out) if r.get("pass") is None]
    assert len(rows) == 4 * 5
    assert {r["sample_id"] for r in rows if r["error"]} == {prepared[2]}
    assert all("breaks the model" in r["error"] for r in rows if r["error"])
    assert {r["batch_size"] for r in rows if not r["error"]} == {1}, "its batch mates ran alone and succeeded"


@pytest.mark.parametrize("flag, asked", [(["--compile-prefill"], True), (["--no-compile-prefill"], False), ([], "auto")])
def test_the_sweep_s_engine_compiles_its_prefill_layers_as_asked(tmp_path, flag, asked):
    """``--compile-prefill`` / ``--no-compile-prefill`` reach the sweep's engine (and the estimate's, which builds the
    same executor); without either, the engine's default: off on a CPU."""
    from kvprune.generation.prefill import COMPILED_LAYERS
    from kvprune.harness.cli import build_parser
    from kvprune.harness.demo import DEMO_MODEL_DIR
    from kvprune.harness.sweep.config import SweepConfig
    from kvprune.harness.sweep.execute import Executor
    from kvprune.models.loading import load_model

    args = build_parser().parse_args(["sweep", "--model", "demo", "--tasks", "demo_pitch", "--data-root", str(tmp_path), *flag])
    config = SweepConfig.build(**SweepConfig.overrides(args))
    assert config.compile_prefill is asked
    loaded = load_model(DEMO_MODEL_DIR, device="cpu")
    executor = Executor(loaded, "engine", compile_prefill=config.compile_prefill)
    try:
        assert executor.engine.compile_prefill is (asked is True)
        assert (executor.engine.module in COMPILED_LAYERS) is (asked is True)
    finally:
        COMPILED_LAYERS.pop(executor.engine.module, None)


def test_a_compile_prefill_setting_that_is_not_a_boolean_is_refused(tmp_path):
    from kvprune.harness.sweep.config import SweepConfig, SweepConfigError

    with pytest.raises(SweepConfigError, match=r"compile_prefill='yes' is invalid: true, false or auto"):
        SweepConfig.build(models=["demo"], tasks=["demo_pitch"], data_root=tmp_path, compile_prefill="yes")


@pytest.mark.parametrize("command", ["sweep", "estimate"])
def test_the_demo_runs_its_prefill_layers_as_written_unless_asked(command):
    """The embedded demo's tiny model never wins back the compilation of its prefill's layers in its short sweep: its
    default is off, for the sweep and for the estimate that prices it; asked, it is on."""
    from kvprune.harness.cli import build_parser
    from kvprune.harness.demo.default import asks_for_demo, prepare_default
    from kvprune.harness.estimate.config import EstimateConfig
    from kvprune.harness.sweep.config import SweepConfig

    kind = SweepConfig if command == "sweep" else EstimateConfig
    for flag, expected in (([], False), (["--compile-prefill"], True)):
        settings = kind.settings(None, **kind.overrides(build_parser().parse_args([command, *flag])))
        assert asks_for_demo(settings.get("models"))
        assert prepare_default(settings)["compile_prefill"] is expected
    other = kind.settings(None, **kind.overrides(build_parser().parse_args([command, "--model", "some/checkpoint"])))
    assert not asks_for_demo(other.get("models")) and "compile_prefill" not in other  # the engine's default: auto
