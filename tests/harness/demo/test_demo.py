"""The embedded demo: the synthetic suite reproduces bit for bit, and the shipped model answers it."""

from __future__ import annotations

import json

import pytest
import soundfile as sf
import torch

from transformers import Qwen2_5OmniThinkerConfig

import kvprune.harness.demo
from kvprune import FastVPress
from kvprune.harness.demo import DEMO_MODEL_DIR, load_demo
from kvprune.harness.demo.build import build_config, build_tokenizer
from kvprune.harness.demo.suite import demo_suite, load_manifest
from kvprune.models import QWEN2_5_OMNI
from kvprune.harness.demo.synthetic import CHOICES, LETTERS, TASKS, format_prompt, make_item, suite_manifest

AUDIO_TOKENS = 375  # 15 s at 25 tokens per second


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return demo_suite(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def demo():
    model, processor = load_demo()
    return model, processor


def inputs_for(processor, folder, meta):
    """The prompt the harness builds for Qwen2.5-Omni (chat template, then the processor)."""
    wave, _ = sf.read(folder / meta["path"], dtype="float32")
    return QWEN2_5_OMNI.prompting.build_inputs(processor, [wave], format_prompt(meta))


def reply(model, processor, inputs) -> str:
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    return processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)[0].strip()


def test_generator_reproduces_the_shipped_held_out_suite(suite):
    assert suite_manifest(suite) == load_manifest()["files"]


def test_suite_uses_audiomarathon_multiple_choice_layout(suite):
    for task in TASKS:
        items = json.loads((suite / task / "test" / "meta.json").read_text())
        assert len(items) == load_manifest()["splits"]["test"]
        for item in items:
            assert (suite / task / "test" / item["path"]).is_file()
            assert [item[f"choice_{x.lower()}"] for x in LETTERS] == list(CHOICES[task])
            assert item["answer_gt"] in LETTERS


def test_items_depend_only_on_their_own_seed():
    first = make_item("order", "test", 3, seed=5)
    again = make_item("order", "test", 3, seed=5)
    assert (first.wave == again.wave).all() and first.meta == again.meta
    assert not (make_item("order", "train", 3, seed=5).wave == first.wave).all()


def test_processor_expands_the_audio_placeholder(demo, suite):
    model, processor = demo
    meta = json.loads((suite / "count" / "test" / "meta.json").read_text())[0]
    inputs = inputs_for(processor, suite / "count" / "test", meta)
    assert int((inputs["input_ids"] == model.config.audio_token_index).sum()) == AUDIO_TOKENS
    assert int(inputs["feature_attention_mask"].sum()) == 4 * AUDIO_TOKENS


def test_shipped_model_answers_held_out_items(demo, suite):
    model, processor = demo
    right = total = 0
    for task in TASKS:
        for meta in json.loads((suite / task / "test" / "meta.json").read_text())[:2]:
            right += reply(model, processor, inputs_for(processor, suite / task / "test", meta)) == meta["answer_gt"]
            total += 1
    assert right >= total - 1, f"{right}/{total} held-out items right"


def test_fastv_prunes_half_the_audio_tokens_of_the_demo_model(demo, suite):
    model, processor = demo
    meta = json.loads((suite / "event" / "test" / "meta.json").read_text())[0]
    inputs = inputs_for(processor, suite / "event" / "test", meta)
    with FastVPress(layer=2)(model, ratio=0.5) as outcome:
        answer = reply(model, processor, inputs)
    assert answer in LETTERS
    assert [(s.audio_tokens, s.kept_tokens) for s in outcome.stats] == [(AUDIO_TOKENS, 188)]


def test_demo_config_built_in_code_is_the_shipped_one():
    """The demo's config comes from Qwen2.5-Omni's tiny config plus the demo's overrides; it must stay
    the architecture of the shipped weights (save_pretrained adds only the class name and dtype)."""
    built = build_config(build_tokenizer()).to_dict()
    shipped = Qwen2_5OmniThinkerConfig.from_pretrained(DEMO_MODEL_DIR).to_dict()
    written_on_save = {"architectures", "dtype"}
    assert set(shipped) - set(built) <= written_on_save
    assert {key: value for key, value in shipped.items() if key not in written_on_save} == {
        key: value for key, value in built.items() if key not in written_on_save
    }


def test_load_demo_explains_missing_files(tmp_path, monkeypatch):
    monkeypatch.setattr(kvprune.harness.demo, "DEMO_MODEL_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="train_demo_model"):
        load_demo()
