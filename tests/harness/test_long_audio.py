"""Long audio is never cut silently: every family's limit is applied by an explicit policy, the
processor is told to keep what the model can take, and what the model received is checked and
recorded. A 10-minute clip on every family; end to end on the demo model (Qwen2.5-Omni, whose
processor cuts at 30 s unless told otherwise), on a tiny Qwen2-Audio checkpoint with its real
processor (30 s chunks), and through the real processors of Voxtral (30 s chunks of its own),
Phi-4-multimodal (whole) and Aero-1 (its published processor's behaviour; 30 s clips) into a
pruned generation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from kvprune import FastVPress
from kvprune.harness.audio import SAMPLING_RATE
from kvprune.harness.cli import main
from kvprune.harness.demo import DEMO_MODEL_DIR
from kvprune.harness.long_audio import LongAudioError, fit_clips, model_inputs, received_seconds

from kvprune.models import QWEN2_5_OMNI
from kvprune.models.loading import LoadedModel, load_model
from kvprune.models.prompting import Prompt
from kvprune.keep_rules import keep_count
from tests.support import task_fixtures
from tests.support.tiny_checkpoints import qwen2_audio_checkpoint
from tests.support.tiny_models import FAMILIES
from tests.support.tiny_processors import processor_and_config, wave
from tests.support.results import result_lines

TEN_MINUTES = 600.0


@pytest.fixture(scope="module")
def ten_minutes() -> np.ndarray:
    return wave(TEN_MINUTES)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_ten_minute_clip_reaches_every_family_whole_or_is_refused_by_name(name, ten_minutes):
    tiny = FAMILIES[name]
    family, config = tiny.family, tiny.config
    audio, longest = family.prompting.audio_format, family.prompting.max_clip_seconds
    fits = longest is None or TEN_MINUTES <= longest  # Audio Flamingo 3: 600 s
    fitted = fit_clips([ten_minutes], longest, "split")
    seconds = [len(w) / SAMPLING_RATE for w in fitted.waves]
    assert sum(seconds) == TEN_MINUTES and max(seconds) <= (longest or TEN_MINUTES)
    assert (fitted.note is None) == fits
    tokens = sum(audio.tokens(config, audio.frames(config, s)) for s in seconds)
    fixed = audio.fixed_tokens(config)  # Gemma-3n: every clip has the same count, whatever its length
    if fixed:
        assert tokens == fixed * len(seconds) == fixed * TEN_MINUTES / longest, "every 30 s its own clip"
    else:
        assert tokens == pytest.approx(TEN_MINUTES * family.prompting.llm_tokens_per_second, rel=0.01), "no audio lost to the split"
    assert received_seconds(family, config, fitted.waves, tokens, truncate_ok=False) == TEN_MINUTES
    first_30_s = fixed or int(30 * family.prompting.llm_tokens_per_second)  # what a processor cutting at 30 s would give
    with pytest.raises(LongAudioError, match="it cut the audio to about 30"):
        received_seconds(family, config, fitted.waves, first_30_s, truncate_ok=False)
    assert received_seconds(family, config, fitted.waves, first_30_s, truncate_ok=True) == pytest.approx(30, rel=0.02)
    truncated = fit_clips([ten_minutes], longest, "truncate")
    if not fits:
        assert [len(w) / SAMPLING_RATE for w in truncated.waves] == [longest]
        assert truncated.note == f"truncated 1 clip(s) to {longest:g} s (longest 600.0 s)"
        with pytest.raises(LongAudioError, match=f"longer than the {longest:g} s"):
            fit_clips([ten_minutes], longest, "error")
    else:
        assert truncated.note is None and fit_clips([ten_minutes], longest, "error").note is None


def test_the_demo_model_gets_all_ten_minutes_though_its_processor_cuts_at_30_seconds(ten_minutes):
    loaded = load_model(DEMO_MODEL_DIR, device="cpu")
    assert loaded.processor.feature_extractor.chunk_length == 30
    config = loaded.family.entry(loaded.model).config
    plain = loaded.build_inputs([ten_minutes[: 60 * SAMPLING_RATE]], "What is heard ?")  # the processor alone
    assert loaded.audio_tokens(plain["input_ids"]) == 750, "left to itself, the processor keeps 30 s of 60"
    with pytest.raises(LongAudioError, match="gave 750 audio tokens for 60.0 s"):
        received_seconds(loaded.family, config, [ten_minutes[: 60 * SAMPLING_RATE]], 750, truncate_ok=False)

    built = model_inputs(loaded, [ten_minutes], "What is heard ?", "split")
    assert built["audio_tokens"] == 15_000 and built["audio_clips"] == 2  # two clips of the family's 300 s
    assert (built["audio_seconds"], built["audio_seconds_received"]) == (TEN_MINUTES, TEN_MINUTES)
    assert built["long_audio"] == "split 1 clip(s) into 2 clips of at most 300 s"
    assert tuple(built["inputs"]["input_features"].shape[::2]) == (2, 30_000)
    assert loaded.processor.feature_extractor.chunk_length == 30, "the processor is restored after the call"
    truncated = model_inputs(loaded, [ten_minutes], "What is heard ?", "truncate")
    assert (truncated["audio_tokens"], truncated["audio_seconds_received"]) == (7_500, 300.0)
    with pytest.raises(LongAudioError):
        model_inputs(loaded, [ten_minutes], "What is heard ?", "error")


def test_a_qwen2_audio_checkpoint_gets_all_ten_minutes_as_30_second_clips(ten_minutes, tmp_path):
    loaded = load_model(qwen2_audio_checkpoint(tmp_path / "qwen2_audio"), device="cpu")
    built = model_inputs(loaded, [ten_minutes], "What is heard ?", "split")
    assert built["audio_tokens"] == 15_000 and built["audio_clips"] == 20 and built["audio_seconds_received"] == TEN_MINUTES
    assert tuple(built["inputs"]["input_features"].shape) == (20, 16, 3000)

    # prompt segments: the pieces of a split clip stand where it stood, in order, between the same texts
    prompt = Prompt(("A\n", 0, "B\n", 1, "What is heard ?"))  # its template writes text items as they are
    built = model_inputs(loaded, [wave(1.0), wave(65.0, seed=1)], prompt, "split")
    tokens = loaded.processor.tokenizer.convert_ids_to_tokens(built["inputs"]["input_ids"][0].tolist())
    audio = [t == "<|AUDIO|>" for t in tokens]
    runs = [len(list(group)) for is_audio, group in itertools.groupby(audio) if is_audio]
    assert runs == [25, 750, 750, 125] and built["audio_clips"] == 4
    assert tokens.index("A") < audio.index(True) < tokens.index("B") < tokens.index("What")
    assert fit_clips([wave(1.0), wave(65.0)], 30.0, "split").prompt(prompt) == Prompt(("A\n", 0, "B\n", 1, 2, 3, "What is heard ?"))


@pytest.mark.parametrize(("name", "clips", "features", "shape"), [
    ("voxtral", 1, "input_features", (20, 16, 3000)),  # one clip: its processor stacks 30 s chunks itself
    ("phi4_multimodal", 1, "audio_input_features", (1, 59_998, 16)),  # whole
    ("aero", 20, "audio_values", (20, 16, 3000)),  # split into its 30 s clips, one audio item each
])
def test_real_processors_get_all_ten_minutes_and_a_pruned_model_runs_on_what_they_give(name, clips, features, shape, ten_minutes,
                                                                                         tmp_path):
    processor, config = processor_and_config(name, tmp_path)
    family = FAMILIES[name].family
    torch.manual_seed(0)
    loaded = LoadedModel(name, family, family.build(config).eval(), processor)
    built = model_inputs(loaded, [ten_minutes], "What is heard ?", "split")
    assert built["audio_tokens"] == TEN_MINUTES * family.prompting.llm_tokens_per_second and built["audio_clips"] == clips
    assert (built["audio_seconds"], built["audio_seconds_received"]) == (TEN_MINUTES, TEN_MINUTES)
    assert built["long_audio"] == (None if clips == 1 else f"split 1 clip(s) into {clips} clips of at most 30 s")
    assert tuple(built["inputs"][features].shape) == shape

    shorter = model_inputs(loaded, [ten_minutes[: 65 * SAMPLING_RATE]], "What is heard ?", "split")  # Aero-1: 30 + 30 + 5 s
    with torch.no_grad(), FastVPress(layer=2)(loaded.model, ratio=0.5) as outcome:
        loaded.generating_module.generate(**shorter["inputs"], max_new_tokens=2, do_sample=False)
    # the model accepted the processor's placeholders (it refuses any other count); the template here writes
    # Aero-1's three items back to back, one run of placeholders the engine prunes as one clip
    assert [(s.audio_tokens, s.kept_tokens) for s in outcome.stats] == [(shorter["audio_tokens"], keep_count(shorter["audio_tokens"], 0.5))]


@pytest.fixture
def omni_limit():
    """Qwen2.5-Omni's clip limit, lowered for a test (the family declaration is frozen)."""
    saved = QWEN2_5_OMNI.prompting.max_clip_seconds

    def set_limit(seconds):
        object.__setattr__(QWEN2_5_OMNI.prompting, "max_clip_seconds", seconds)

    yield set_limit
    set_limit(saved)


@pytest.fixture(scope="module")
def long_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    with task_fixtures.clip_seconds(45.0):  # beyond the demo processor's 30 s
        task_fixtures.had(root, real=1, fake=1)
    return root


def long_sweep(data, out, *extra):
    return main(["sweep", "--model", "demo", "--tasks", "had", "--methods", "frame", "--ratios", "0.5", "--data-root", str(data),
                 "--out", str(out), "--device", "cpu", "--quiet", "--no-reuse-encoder", "--no-share-layers", *extra])


def test_a_sweep_records_what_the_model_received_under_each_policy(long_data, tmp_path, omni_limit):
    assert long_sweep(long_data, tmp_path / "whole") == 0
    rows = result_lines(tmp_path / "whole")
    assert {(r["audio_seconds"], r["audio_seconds_received"], r["audio_clips"], r["audio_tokens"], r["long_audio"]) for r in rows} \
        == {(45.0, 45.0, 1, 1125, None)}, "45 s whole, where the processor alone would pass 30"

    omni_limit(20.0)
    assert long_sweep(long_data, tmp_path / "split") == 0
    rows = result_lines(tmp_path / "split")
    assert {(r["audio_seconds_received"], r["audio_clips"], r["audio_tokens"]) for r in rows} == {(45.0, 3, 1125)}
    assert {r["long_audio"] for r in rows} == {"split 1 clip(s) into 3 clips of at most 20 s"}
    halves = 2 * keep_count(500, 0.5) + keep_count(125, 0.5)
    assert all(r["kept_tokens"] == halves for r in rows if r["method"] == "frame"), "each clip keeps its own half"

    assert long_sweep(long_data, tmp_path / "truncate", "--long-audio", "truncate") == 0
    rows = result_lines(tmp_path / "truncate")
    assert {(r["audio_seconds"], r["audio_seconds_received"], r["audio_tokens"]) for r in rows} == {(45.0, 20.0, 500)}
    report = (tmp_path / "truncate" / "report.md").read_text()
    assert "**Long audio: 2 sample(s) did not fit the model as one clip.**" in report and "2 of them were truncated" in report

    assert long_sweep(long_data, tmp_path / "error", "--long-audio", "error") == 1
    errors = {r["error"] for r in result_lines(tmp_path / "error")}
    assert errors == {"LongAudioError: a clip of 45.0 s is longer than the 20 s Qwen2.5-Omni takes as one audio item; "
                      "the long-audio policy is 'error' (use split or truncate to run it)."}


def test_the_policy_is_part_of_the_folder_settings(long_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert long_sweep(long_data, out) == 0
    assert long_sweep(long_data, out, "--long-audio", "truncate") == 2
    assert "long_audio: split before, truncate now" in capsys.readouterr().err


def test_a_policy_per_task_from_the_sweep_file(tmp_path):
    from kvprune.harness.sweep.config import SweepConfig

    config = SweepConfig.build(models="demo", tasks="had,gtzan", methods="frame", data_root=tmp_path,
                               long_audio={"default": "truncate", "gtzan": "error"})
    assert (config.long_audio_policy("had"), config.long_audio_policy("gtzan")) == ("truncate", "error")
    with pytest.raises(ValueError, match="long-audio policy 'drop' is invalid: choose split, truncate, error"):
        SweepConfig.build(models="demo", tasks="had", methods="frame", data_root=tmp_path, long_audio="drop")
