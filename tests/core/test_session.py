"""How a press behaves as a context manager: generation modes, later turns, errors, clean exit,
and presses as configuration (never changed by a run, one press on several models)."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pytest
import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM, Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

from kvprune import (
    ComposedPress, DARTPress, FastVPress, FramePress, KNormPress, RandomPress, TokenDropPress, UnsupportedModelError, get_press,
)
from kvprune.engine.attention_probe import _ConfigView
from kvprune.keep_rules import keep_count
from kvprune.ratios import Ratio, validate_ratio
from tests.support.helpers import GREEDY, K, FixedPress, cache_lengths, cache_of, model, n_layers
from tests.support.tiny_models import FAMILIES, N_LAYERS

ROW = [[("text", 4), ("audio", 16), ("text", 5)]]
FAMILY_NAMES = list(FAMILIES)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("press_name", ["fastv", "dart"])
def test_second_turn_on_the_same_cache_equals_recompute(family, press_name):
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs(ROW)
    press = get_press(press_name, layer=K)
    with torch.no_grad(), press(m, ratio=0.5) as outcome:
        first = m.generate(**inputs, max_new_tokens=3, return_dict_in_generate=True, **GREEDY)
        follow_up = torch.randint(10, 90, (1, 5), generator=torch.Generator().manual_seed(7))
        ids = torch.cat([first.sequences, follow_up], dim=1)
        second = m.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache_of(first),
            max_new_tokens=3, output_logits=True, return_dict_in_generate=True, **GREEDY,
        )
    kept = outcome.kept_positions
    fixed = FixedPress(ratio=0.5, layer=K, positions=kept)
    for step, step_logits in enumerate(second.logits):
        seq = second.sequences[:, : ids.shape[1] + step]
        with torch.no_grad(), fixed(m):
            logits = m(**dict(inputs, input_ids=seq, attention_mask=torch.ones_like(seq)), use_cache=False).logits[:, -1]
        torch.testing.assert_close(logits, step_logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(outcome.kept_positions[0], kept[0]), "a later turn does not prune again"


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_sampling(family):
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs(ROW)
    sample = dict(GREEDY, do_sample=True, top_k=0, max_new_tokens=6)
    torch.manual_seed(11)
    with torch.no_grad():
        reference = m.generate(**inputs, **sample)
    press = RandomPress(layer=K, seed=5)
    with torch.no_grad(), press(m, ratio=0.0):
        torch.manual_seed(11)
        unpruned = m.generate(**inputs, **sample)
    assert torch.equal(unpruned, reference)
    with torch.no_grad(), press(m, ratio=0.75) as outcome:
        torch.manual_seed(11)
        out = m.generate(**inputs, **sample, return_dict_in_generate=True)
    width, steps = inputs["input_ids"].shape[1], out.sequences.shape[1] - inputs["input_ids"].shape[1] - 1
    audio = FAMILIES[family].audio_tokens(ROW[0])
    assert outcome.stats[0].kept_tokens == keep_count(audio, 0.75)
    dropped = audio - keep_count(audio, 0.75)
    assert cache_lengths(cache_of(out), family)[K:] == [width - dropped + steps] * (n_layers(family) - K)


def test_full_qwen2_5_omni_model_prunes_its_thinker():
    thinker = model("qwen2_5_omni", "sdpa")
    full = Qwen2_5OmniForConditionalGeneration(Qwen2_5OmniConfig(thinker_config=FAMILIES["qwen2_5_omni"].config.to_dict(), enable_audio_output=False)).eval()
    full.thinker.load_state_dict(thinker.state_dict())
    inputs = FAMILIES["qwen2_5_omni"].inputs(ROW)
    press = FastVPress(layer=K)
    with torch.no_grad(), press(thinker, ratio=0.5) as outcome:
        expected = thinker.generate(**inputs, max_new_tokens=4, **GREEDY)
    expected_kept = outcome.kept_positions
    with torch.no_grad(), press(full, ratio=0.5) as outcome:  # the press is given the full model ...
        tokens = full.thinker.generate(**inputs, max_new_tokens=4, **GREEDY)  # ... whose generate runs this
    assert torch.equal(tokens, expected)
    assert torch.equal(outcome.kept_positions[0], expected_kept[0])


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_prompt_without_audio_is_a_no_op(family):
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs([[("text", 9)], [("text", 6)]])
    with torch.no_grad():
        reference = m.generate(**inputs, max_new_tokens=4, **GREEDY)
        with FastVPress(layer=K)(m, ratio=0.9) as outcome:
            tokens = m.generate(**inputs, max_new_tokens=4, **GREEDY)
    assert torch.equal(tokens, reference)
    assert [len(p) for p in outcome.kept_positions] == [0, 0]
    assert [(s.audio_tokens, s.kept_tokens) for s in outcome.stats] == [(0, 0), (0, 0)]


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5, float("nan"), "0.5", True])
def test_bad_ratio_is_refused_with_its_value(ratio):
    with pytest.raises(ValueError, match="ratio=.*must lie in \\[0, 1\\)") as error:
        FramePress(ratio=ratio)
    assert repr(ratio) in str(error.value)
    press = FramePress()
    with pytest.raises(ValueError, match="ratio="):
        press(model("voxtral", "sdpa"), ratio=ratio)


def test_a_ratio_is_checked_once_and_stays_the_number_it_was():
    """A press holds a ``Ratio`` it is given as it is (checked once, where it was made) and turns a plain
    number into one; either way the value, its text and what a sweep writes of it are the float's."""
    parsed = validate_ratio(0.37)
    assert FramePress(ratio=parsed).ratio is parsed
    plain = FramePress(ratio=0.37)
    assert isinstance(plain.ratio, Ratio) and plain.ratio == 0.37 and plain == FramePress(ratio=parsed)
    assert repr(plain) == repr(dataclasses.replace(plain, ratio=0.37)) and "ratio=0.37," in repr(plain)
    assert json.dumps({"ratio": parsed}) == '{"ratio": 0.37}' and round(parsed, 6) == 0.37
    copied = copy.deepcopy(parsed)
    assert copied == parsed and isinstance(copied, Ratio) and pickle.loads(pickle.dumps(plain)) == plain


@pytest.mark.parametrize("layer", [0, N_LAYERS, -1])
def test_bad_layer_is_refused(layer):
    with pytest.raises(ValueError, match=f"layer={layer} is invalid"):
        FastVPress(layer=layer)(model("voxtral", "sdpa"), ratio=0.5)


def test_unknown_press_name_lists_the_choices():
    with pytest.raises(ValueError, match="unknown press 'snap'.*fastv, random, frame, dart"):
        get_press("snap")


def test_unsupported_model_lists_supported_families():
    text_only = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(UnsupportedModelError) as error:
        FastVPress()(text_only, ratio=0.5)
    message = str(error.value)
    assert "Qwen2ForCausalLM" in message
    for name in ["Qwen2.5-Omni", "Phi-4-multimodal", "Voxtral", "Aero-1-Audio", "Qwen2-Audio", "Qwen3-Omni", "Gemma-3n"]:
        assert name in message


def test_missing_audio_token_id_says_how_to_set_it():
    m = model("voxtral", "sdpa")
    saved, m.config.audio_token_id = m.config.audio_token_id, None
    try:
        with pytest.raises(ValueError, match="audio_token_id = processor.audio_token_id"):
            FastVPress()(m, ratio=0.5)
    finally:
        m.config.audio_token_id = saved


def _hook_count(m) -> int:
    return sum(len(x._forward_pre_hooks) + len(x._forward_hooks) for x in m.modules())


def test_hooks_are_removed_when_the_body_raises():
    m = model("qwen2_5_omni", "sdpa")
    inputs = FAMILIES["qwen2_5_omni"].inputs(ROW)
    before = _hook_count(m)
    with pytest.raises(RuntimeError, match="boom"):
        with FastVPress(layer=K)(m, ratio=0.5):
            assert _hook_count(m) > before
            m(**inputs)
            raise RuntimeError("boom")
    assert _hook_count(m) == before
    assert not any(isinstance(getattr(x, "config", None), _ConfigView) for x in m.modules())
    with torch.no_grad():
        assert torch.equal(m(**inputs).logits, m(**inputs).logits)  # runs unpruned again


def test_inputs_embeds_without_input_ids_is_refused():
    m = model("phi4_multimodal", "sdpa")
    inputs = FAMILIES["phi4_multimodal"].inputs([[("text", 5)]])
    embeds = m.get_input_embeddings()(inputs["input_ids"])
    with pytest.raises(ValueError, match="input_ids"):
        with torch.no_grad(), FastVPress()(m, ratio=0.5):
            m(inputs_embeds=embeds, attention_mask=inputs["attention_mask"])


def test_plain_forward_then_manual_decoding_on_the_returned_cache():
    """Without generate: a forward that creates its own cache, then one decoding step on it."""
    m = model("qwen2_audio", "eager")
    inputs = FAMILIES["qwen2_audio"].inputs(ROW)
    with torch.no_grad(), FramePress(layer=K)(m, ratio=0.5) as outcome:
        out = m(**inputs, use_cache=True)
        next_token = out.logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([inputs["input_ids"], next_token], dim=1)
        step = m(input_ids=next_token, attention_mask=torch.ones_like(ids), past_key_values=cache_of(out), use_cache=True)
    fixed = FixedPress(ratio=0.5, layer=K, positions=outcome.kept_positions)
    with torch.no_grad(), fixed(m):
        full = m(**dict(inputs, input_ids=ids, attention_mask=torch.ones_like(ids)), use_cache=False)
    torch.testing.assert_close(step.logits[:, -1], full.logits[:, -1], rtol=1e-4, atol=1e-4)


def test_calling_a_press_never_changes_it():
    press = FastVPress(layer=K)
    m = model("voxtral", "sdpa")
    with torch.no_grad(), press(m, ratio=0.5) as outcome:
        m(**FAMILIES["voxtral"].inputs(ROW))
    assert press == FastVPress(layer=K) and press.ratio == 0.0
    assert outcome.press == FastVPress(ratio=0.5, layer=K)
    assert [s.kept_tokens for s in outcome.stats] == [8]
    with pytest.raises(dataclasses.FrozenInstanceError):
        press.ratio = 0.5


def test_one_press_on_two_models_nested_equals_each_alone():
    press = DARTPress(layer=K)
    cases = [("voxtral", 0.5), ("qwen2_audio", 0.25)]
    models = [model(family, "sdpa") for family, _ in cases]
    inputs = [FAMILIES[family].inputs(ROW) for family, _ in cases]
    alone = []
    for m, x, (_, ratio) in zip(models, inputs, cases):
        with torch.no_grad(), press(m, ratio=ratio) as outcome:
            alone.append((m.generate(**x, max_new_tokens=3, **GREEDY), outcome.kept_positions))
    with torch.no_grad(), press(models[0], ratio=0.5) as first, press(models[1], ratio=0.25) as second:
        together = [m.generate(**x, max_new_tokens=3, **GREEDY) for m, x in zip(models, inputs)]
    for outcome, tokens, (expected_tokens, expected_kept) in zip([first, second], together, alone):
        assert torch.equal(tokens, expected_tokens)
        assert torch.equal(outcome.kept_positions[0], expected_kept[0])
    assert [s.kept_tokens for s in first.stats] == [8] and [s.kept_tokens for s in second.stats] == [12]


def test_every_press_says_which_layer_it_acts_on_first():
    assert FastVPress().layer == 2 and KNormPress().layer == 1
    assert ComposedPress([FramePress(layer=3), KNormPress(layer=2)]).layer == 2


@dataclasses.dataclass(frozen=True)
class OutsidePress(TokenDropPress):
    """Wrongly keeps the token before each clip."""

    def select(self, clip, evidence):
        return clip.positions(evidence.device)[: clip.n_keep] - 1


def test_a_select_outside_its_clip_is_reported():
    m = model("voxtral", "sdpa")
    with torch.no_grad(), OutsidePress(layer=K)(m, ratio=0.5) as outcome:
        m(**FAMILIES["voxtral"].inputs(ROW))
    with pytest.raises(RuntimeError, match="OutsidePress.select returned positions outside its clip"):
        outcome.kept_positions
