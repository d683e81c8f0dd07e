"""One press per model at a time (nesting is refused with a way out), one press on several models,
the positions a plain forward's logits belong to, the sweep's up-front check of a press against a
model, and the random press's draw per sample."""

from __future__ import annotations

import pytest
import torch

from kvprune import ComposedPress, DARTPress, FastVPress, FramePress, KNormPress, RandomPress
from kvprune.engine.press_plan import validate_press
from tests.support.helpers import GREEDY, K, model, single_row
from tests.support.tiny_models import AUDIO, FAMILIES, N_LAYERS

ROW = [[("text", 4), ("audio", 16), ("text", 5)]]


def _hooks(m) -> int:
    return sum(len(x._forward_pre_hooks) + len(x._forward_hooks) for x in m.modules())


@pytest.mark.parametrize(
    "outer,inner",
    [
        (FastVPress(layer=K), FramePress(layer=K)),  # two different presses
        (FastVPress(layer=K), FastVPress(layer=K)),  # the same press twice
        (KNormPress(), KNormPress(layer=2)),  # two cache presses
        (FramePress(layer=K), KNormPress()),  # a token and a cache press: compose them instead
    ],
)
def test_a_second_press_on_the_same_model_is_refused_and_the_first_keeps_working(outer, inner):
    m = model("qwen2_5_omni", "sdpa")
    inputs = FAMILIES["qwen2_5_omni"].inputs(ROW)
    with torch.no_grad(), outer(m, ratio=0.5) as outcome:
        alone = m.generate(**inputs, max_new_tokens=4, **GREEDY)
    before = _hooks(m)
    with torch.no_grad(), outer(m, ratio=0.5) as outcome:
        hooks = _hooks(m)
        with pytest.raises(RuntimeError, match="already active on this model") as refused:
            with inner(m, ratio=0.5):
                pass
        assert _hooks(m) == hooks, "the refused press installed nothing"
        tokens = m.generate(**inputs, max_new_tokens=4, **GREEDY)
    assert "ComposedPress([" in str(refused.value) and "'frame+knorm" in str(refused.value)
    assert torch.equal(tokens, alone) and outcome.stats[0].kept_tokens in (8, 16)
    assert _hooks(m) == before
    with torch.no_grad(), inner(m, ratio=0.5):  # released on exit: the next press may run
        m(**inputs)


def test_the_composition_the_refusal_suggests_runs_both_presses():
    m = model("voxtral", "sdpa")
    inputs = FAMILIES["voxtral"].inputs(ROW)
    with torch.no_grad(), ComposedPress([FramePress(ratio=0.5, layer=K), KNormPress(ratio=0.5)])(m) as outcome:
        m.generate(**inputs, max_new_tokens=2, **GREEDY)
    assert outcome.stats[0].kept_tokens == 8
    assert all(stats[0].kept_tokens == 4 for layer, stats in outcome.layer_stats.items() if layer >= K)


def test_the_full_qwen2_5_omni_model_and_its_thinker_count_as_one_model():
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    full = Qwen2_5OmniForConditionalGeneration(
        Qwen2_5OmniConfig(thinker_config=FAMILIES["qwen2_5_omni"].config.to_dict(), enable_audio_output=False)
    ).eval()
    with FramePress(layer=K)(full, ratio=0.5):
        with pytest.raises(RuntimeError, match="already active"):
            with FastVPress(layer=K)(full.thinker, ratio=0.5):
                pass


def test_a_session_released_after_an_error_can_be_entered_again():
    m = model("qwen2_audio", "sdpa")
    with pytest.raises(KeyError):
        with FastVPress(layer=K)(m, ratio=0.5):
            raise KeyError("boom")
    with FramePress(layer=K)(m, ratio=0.5):
        pass


def test_one_cache_press_on_two_models_at_once_keeps_two_sessions():
    press = KNormPress()
    families = ["voxtral", "qwen2_audio"]
    models = [model(f, "sdpa") for f in families]
    inputs = [FAMILIES[f].inputs(ROW) for f in families]
    alone = []
    for m, x, ratio in zip(models, inputs, (0.25, 0.75)):
        with torch.no_grad(), press(m, ratio=ratio) as outcome:
            alone.append((m.generate(**x, max_new_tokens=3, **GREEDY), outcome.layer_stats))
    with torch.no_grad(), press(models[0], ratio=0.25) as first, press(models[1], ratio=0.75) as second:
        tokens = [m.generate(**x, max_new_tokens=3, **GREEDY) for m, x in zip(reversed(models), reversed(inputs))][::-1]
    for outcome, out, (expected, stats) in zip((first, second), tokens, alone):
        assert torch.equal(out, expected) and outcome.layer_stats == stats
    assert first.layer_stats[1][0].kept_tokens == 12 and second.layer_stats[1][0].kept_tokens == 4


def test_logit_positions_say_which_prompt_position_each_logit_row_belongs_to():
    family = FAMILIES["qwen2_audio"]
    m = model("qwen2_audio", "eager")
    rows = [[("text", 3), ("audio", 12), ("text", 4)], [("text", 5), ("audio", 8), ("text", 2)]]  # row 1 left-padded
    inputs = family.inputs(rows)
    with torch.no_grad():
        full = m(**inputs).logits
        with FramePress(layer=K)(m, ratio=0.5) as outcome:
            pruned = m(**inputs).logits
        with KNormPress()(m, ratio=0.5) as cache_outcome:  # a cache press leaves the prefill whole
            m(**inputs)
    width = inputs["input_ids"].shape[1]
    assert [p.tolist() for p in cache_outcome.logit_positions] == [list(range(width))] * 2
    assert pruned.shape[1] == len(outcome.logit_positions[0]) == len(outcome.logit_positions[1]) < width
    for b, positions in enumerate(outcome.logit_positions):
        real = positions[positions >= 0]
        audio = inputs["input_ids"][b] == AUDIO
        kept_audio = sorted(real[audio[real]].tolist())
        assert real.tolist() == sorted(real.tolist()) and real[-1] == width - 1
        assert set(real.tolist()) == set((~audio).nonzero().flatten().tolist()) | set(kept_audio)  # padding too, as unpruned
        assert len(kept_audio) == outcome.stats[b].kept_tokens
    # layers before K saw everything: the text before the audio predicts exactly as unpruned
    for b, positions in enumerate(outcome.logit_positions):
        first_audio = int((inputs["input_ids"][b] == AUDIO).nonzero()[0])
        before = [i for i, p in enumerate(positions.tolist()) if 0 <= p < first_audio and inputs["attention_mask"][b, p]]
        torch.testing.assert_close(pruned[b, before], full[b, positions[before]], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer", [0, N_LAYERS, 9])
def test_validate_press_gives_the_error_a_run_would_give_without_touching_the_model(layer):
    m = model("phi4_multimodal", "sdpa")
    before = _hooks(m)
    for press in (FastVPress(layer=layer), ComposedPress([FramePress(), KNormPress(layer=layer)])):
        with pytest.raises(ValueError, match=f"layer={layer} is invalid.*\\[1, {N_LAYERS - 1}\\]"):
            validate_press(m, press)
    assert _hooks(m) == before
    validate_press(m, DARTPress(layer=N_LAYERS - 1))


def test_the_random_press_draws_per_sample_and_the_same_for_a_row_alone_or_in_a_batch():
    family, m = FAMILIES["voxtral"], model("voxtral", "sdpa")
    rows = [[("text", 4), ("audio", 24), ("text", 5)], [("text", 4), ("audio", 24), ("text", 5)]]
    batch = family.inputs(rows, seed=3)  # the same layout, different text tokens: two samples
    assert not torch.equal(batch["input_ids"][0], batch["input_ids"][1])
    with torch.no_grad(), RandomPress(layer=K, seed=1)(m, ratio=0.5) as outcome:
        m(**batch)
    together = [p.tolist() for p in outcome.kept_positions]
    assert together[0] != together[1], "two samples with clips of the same length draw differently"
    for b in range(2):
        alone = single_row(family, rows, b, seed=3)
        with torch.no_grad(), RandomPress(layer=K, seed=1)(m, ratio=0.5) as outcome:
            m(**alone)
        assert outcome.kept_positions[0].tolist() == together[b]
    with torch.no_grad(), RandomPress(layer=K, seed=2)(m, ratio=0.5) as outcome:
        m(**batch)
    assert [p.tolist() for p in outcome.kept_positions] != together, "the seed changes the draw"
