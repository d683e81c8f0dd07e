"""Prompts without audio, for ablations: every family's processor builds one, every press runs on it
with nothing to prune (outputs identical to no press, at any ratio); ``--no-audio`` sweeps leave the
audio out, put STAR-Bench's scene caption (and MMAR's caption field, where an item has one) where
the clips stood, and every press's outputs equal the unpruned run's."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from tests.support import benchmark_fixtures
from tests.support.helpers import GREEDY
from kvprune import get_press, list_presses
from kvprune.harness.cli import main

from kvprune.harness.tasks.task import get_task
from tests.support.tiny_models import FAMILIES
from tests.support.tiny_processors import processor_and_config
from tests.support.results import result_lines


@pytest.fixture(scope="module")
def text_only(tmp_path_factory):
    """Per family: a tiny model agreeing with its real processor, and that processor's text-only inputs."""
    built = {}

    def get(name):
        if name not in built:
            processor, config = processor_and_config(name, tmp_path_factory.mktemp(name))
            torch.manual_seed(0)
            model = FAMILIES[name].family.build(config).eval()
            built[name] = model, FAMILIES[name].family.prompting.build_inputs(processor, [], "What is heard ?")
        return built[name]

    return get


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_press_leaves_a_prompt_without_audio_as_it_is(text_only, name):
    model, inputs = text_only(name)
    inputs = {key: value for key, value in inputs.items() if isinstance(value, torch.Tensor)}
    with torch.no_grad():
        reference = model.generate(**inputs, max_new_tokens=3, **GREEDY)
        for press_name in list_presses():
            with get_press(press_name)(model, ratio=0.9) as outcome:
                tokens = model.generate(**inputs, max_new_tokens=3, **GREEDY)
            assert torch.equal(tokens, reference), press_name
            assert [(s.audio_tokens, s.kept_tokens) for s in outcome.stats] == [(0, 0)] and outcome.layer_stats == {}


def test_a_prompt_without_audio_keeps_the_caption_where_the_audio_stood(tmp_path):
    benchmark_fixtures.starbench(tmp_path)
    task = get_task("starbench_tr")
    sample = task.load(tmp_path)[0]
    prompt = task.render(sample, no_audio=True)
    caption = f"Here is a caption that describes the full, uncut audio scene: {sample.meta['global_caption']}\n"
    assert prompt.segments == (task.render(sample).segments[0], caption) and prompt.files == ()
    mmar = get_task("mmar")
    items = benchmark_fixtures.mmar(tmp_path)
    items[0]["caption"] = "Two people talk over music."
    (tmp_path / "MMAR" / "MMAR-meta.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    with_caption, without = mmar.load(tmp_path)
    assert mmar.render(with_caption, no_audio=True).segments == ("Audio caption: Two people talk over music.\n",
                                                                 mmar.render(with_caption).segments[-1])
    assert mmar.render(without, no_audio=True).segments == (mmar.render(without).segments[-1],), "text only"


def sweep(data_root, out, *extra) -> list[str]:
    return ["sweep", "--model", "demo", "--tasks", "starbench_tr,mmar", "--methods", ",".join(list_presses()),
            "--ratios", "0.5", "--data-root", str(data_root), "--out", str(out), "--device", "cpu",
            "--quiet", "--no-plots", "--max-new-tokens", "3", "--limit", "1", *extra]


def test_a_no_audio_sweep_runs_every_press_with_nothing_to_prune_and_says_so(tmp_path, capsys):
    benchmark_fixtures.starbench(tmp_path / "data")
    benchmark_fixtures.mmar(tmp_path / "data")
    out = tmp_path / "out"
    assert main(sweep(tmp_path / "data", out, "--no-audio")) == 0
    rows = result_lines(out)
    assert rows and all(r["error"] is None and r["audio_tokens"] == 0 and r["audio_seconds"] == 0 for r in rows)
    baseline = {(r["task"], r["sample_id"]): r["output"] for r in rows if r["method"] == "none"}
    for row in rows:
        assert row["output"] == baseline[(row["task"], row["sample_id"])], f"{row['method']}: nothing to prune"
    assert json.loads((out / "plan.json").read_text())["settings"]["no_audio"] is True
    # marked: each row says what stood for its audio (STAR-Bench's caption; MMAR's items here have none)
    assert {(r["task"], r["audio_input"]) for r in rows} == {("starbench_tr", "caption"), ("mmar", "none")}
    summary = pd.read_csv(out / "summary.csv")
    assert dict(zip(summary["task"], summary["audio_input"])) == {"starbench_tr": "caption", "mmar": "none"}
    pruned = summary[summary["method"] != "none"]
    assert pruned["nothing_pruned"].all() and (pruned["pruned_tokens"] == 0).all()
    printed, report = capsys.readouterr().out, (out / "report.md").read_text()
    assert report.startswith("# kvprune sweep: out\n\n> **No audio (`--no-audio`): an ablation, not a pruning result.**")
    assert "> - mmar: no audio at all in 1 of 1 sample(s)" in report
    runs = len({r["sample_id"] for r in rows if r["task"] == "starbench_tr"})  # one item, run in every clip order
    assert f"> - starbench_tr: the task's caption in place of the audio in {runs} of {runs} sample(s)" in report
    assert "**mmar [no audio] (" in report and "| fastv [no audio] | 0.5 |" in report
    assert "**starbench_tr [caption for audio] (" in report and "fastv [caption for audio]" in printed
    headline = report[report.index("## Headline"):report.index("## How the samples ran")]
    assert "×" not in headline.split("| ratio 0.5 |")[1], "no pruned run is headlined with a speedup"
    assert "(nothing pruned)" in headline and "nothing pruned" in printed

    capsys.readouterr()
    assert main(sweep(tmp_path / "data", out)) == 2, "runs with audio never join an ablation's folder"
    assert "the folder holds runs without their audio (a --no-audio ablation)" in capsys.readouterr().err
    assert len(result_lines(out)) == len(rows)
    assert main(sweep(tmp_path / "data", tmp_path / "audio", "--methods", "frame")) == 0
    assert main(sweep(tmp_path / "data", tmp_path / "audio", "--methods", "frame", "--no-audio")) == 2
    assert "the folder holds runs with their audio, and this sweep runs without audio" in capsys.readouterr().err
