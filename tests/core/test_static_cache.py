"""Pruned prompts on a static cache (``cache_implementation="static"``): every layer keeps its own
length, decoding equals the dynamic cache, and the decode step compiles into one graph."""

from __future__ import annotations

import csv

import pytest
import torch
from transformers import CompileConfig, StaticCache
from transformers.cache_utils import StaticSlidingWindowLayer

from kvprune import ComposedPress, FramePress, KNormPress, get_press
from kvprune.engine.press_plan import validate_press
from kvprune.engine.static_cache import PrunedStaticLayer
from tests.support.helpers import GREEDY, K, FixedPress, cache_lengths, cache_of, model
from tests.support.paths import load_script
from tests.support.tiny_models import FAMILIES, N_LAYERS

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILY_NAMES = list(FAMILIES)
ROW = [[("text", 4), ("audio", 16), ("text", 5)]]
TWO_ROWS = [[("text", 3), ("audio", 12), ("text", 4)], [("text", 5), ("audio", 20), ("text", 3)]]  # left padding
NEW_TOKENS = 5
PRESSES = {
    **{name: get_press(name, layer=K, ratio=0.5) for name in ["fastv", "random", "frame", "dart"]},
    "knorm": KNormPress(ratio=0.5),
    "frame+knorm": ComposedPress([FramePress(layer=K, ratio=0.5), KNormPress(ratio=0.5)]),
}
RETURN = dict(output_logits=True, return_dict_in_generate=True, **GREEDY)
#: families whose static cache a pruned prompt cannot take exactly: refused, naming the family, why and the fix
REFUSED = {"gemma3n": "Gemma-3n: kvprune cannot prune into a static cache.*layer 0 is a StaticSlidingWindowLayer"
                      r".*layers 4\.\. attend to the caches of layers \[2, 3\].*Use the default dynamic cache"}


def refused(family: str):
    """The error a pruning press meets on ``family``'s static cache, before the model runs."""
    return pytest.raises(NotImplementedError, match=REFUSED[family])


def _generate(m, press, inputs, **kwargs):
    with torch.no_grad(), press(m):
        return m.generate(**inputs, max_new_tokens=NEW_TOKENS, **RETURN, **kwargs)


def _new_tokens(out, inputs) -> int:
    return out.sequences.shape[1] - inputs["input_ids"].shape[1]


@pytest.mark.parametrize("rows", [ROW, TWO_ROWS], ids=["one", "padded_two"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("press_name", list(PRESSES))
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_static_decoding_equals_dynamic_with_each_layer_at_its_own_length(family, press_name, attn, rows):
    m = model(family, attn)
    inputs = FAMILIES[family].inputs(rows)
    press = PRESSES[press_name]
    if family in REFUSED:
        with refused(family), press(m) as outcome, torch.no_grad():
            m.generate(**inputs, max_new_tokens=NEW_TOKENS, cache_implementation="static", **GREEDY)
        assert outcome.stats == [] and outcome.layer_stats == {}, "refused before anything ran"
        return
    dynamic = _generate(m, press, inputs)
    static = _generate(m, press, inputs, cache_implementation="static")

    assert torch.equal(static.sequences, dynamic.sequences)
    for step, (s, d) in enumerate(zip(static.logits, dynamic.logits)):
        torch.testing.assert_close(s, d, rtol=1e-5, atol=1e-5, msg=f"step {step}")
    cache = cache_of(static)
    assert all(isinstance(layer, PrunedStaticLayer) for layer in cache.layers)
    # each layer holds what the dynamic cache held after the prefill, plus the same room for new tokens
    room = cache.layers[0].max_cache_len - inputs["input_ids"].shape[1]
    held_by_dynamic = [n - (_new_tokens(dynamic, inputs) - 1) for n in cache_lengths(cache_of(dynamic))]
    assert [n - room for n in cache_lengths(cache)] == held_by_dynamic
    assert held_by_dynamic[K] < held_by_dynamic[0], "layers >= K hold fewer entries"


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_plain_forward_calls_on_a_static_cache_equal_dynamic(family):
    """Without generate (as a benchmark feeding forced tokens does): a prefill into a StaticCache, then
    one-token calls; the model builds each step's mask itself."""
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs(ROW)
    if family in REFUSED:
        with refused(family), torch.no_grad(), PRESSES["fastv"](m):
            m(**inputs, use_cache=True, past_key_values=StaticCache(config=m.config, max_cache_len=64))
        return
    steps = [torch.tensor([[20 + i]]) for i in range(3)]
    logits = {}
    for kind in ("dynamic", "static"):
        cache = StaticCache(config=m.config, max_cache_len=inputs["input_ids"].shape[1] + len(steps))
        with torch.no_grad(), PRESSES["fastv"](m):
            out = m(**inputs, use_cache=True, **(dict(past_key_values=cache) if kind == "static" else {}))
            cache, logits[kind] = cache_of(out), [out.logits[:, -1]]
            for token in steps:
                logits[kind].append(m(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1])
    assert cache_lengths(cache)[K] < cache_lengths(cache)[0]
    torch.testing.assert_close(torch.stack(logits["static"]), torch.stack(logits["dynamic"]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("prompt", [ROW, [[("text", 9)], [("text", 6)]]], ids=["ratio_0", "no_audio"])
def test_nothing_to_prune_is_stock_static(family, prompt):
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs(prompt)
    ratio = 0.0 if prompt is ROW else 0.9
    press = get_press("fastv", layer=K, ratio=ratio)
    if family in REFUSED and ratio > 0:  # refused whatever the prompt holds, audio or not
        with refused(family):
            _generate(m, press, inputs, cache_implementation="static")
        return
    with torch.no_grad():
        stock = m.generate(**inputs, max_new_tokens=NEW_TOKENS, cache_implementation="static", **RETURN)
    out = _generate(m, press, inputs, cache_implementation="static")
    assert torch.equal(out.sequences, stock.sequences)
    assert all(torch.equal(a, b) for a, b in zip(out.logits, stock.logits))
    layers = [type(layer) for layer in cache_of(out).layers]
    assert layers == [type(layer) for layer in cache_of(stock).layers] and PrunedStaticLayer not in layers, \
        "the stock cache, untouched"


@pytest.mark.parametrize("family", ["qwen2_5_omni", "voxtral"])
def test_second_turn_on_a_static_cache_with_room_equals_recompute(family):
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs(ROW)
    press = get_press("fastv", layer=K)
    cache = StaticCache(config=m.config, max_cache_len=64)
    with torch.no_grad(), press(m, ratio=0.5) as outcome:
        first = m.generate(**inputs, past_key_values=cache, max_new_tokens=3, **RETURN)
        follow_up = torch.randint(10, 90, (1, 5), generator=torch.Generator().manual_seed(7))
        ids = torch.cat([first.sequences, follow_up], dim=1)
        second = m.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache, max_new_tokens=3, **RETURN
        )
    assert cache_lengths(cache)[K] < cache_lengths(cache)[0] == 64
    fixed = FixedPress(ratio=0.5, layer=K, positions=outcome.kept_positions)
    for step, step_logits in enumerate(second.logits):
        seq = second.sequences[:, : ids.shape[1] + step]
        with torch.no_grad(), fixed(m):
            logits = m(**dict(inputs, input_ids=seq, attention_mask=torch.ones_like(seq)), use_cache=False).logits[:, -1]
        torch.testing.assert_close(logits, step_logits, rtol=1e-4, atol=1e-4)


def test_second_turn_without_room_says_how_to_make_room():
    m = model("voxtral", "sdpa")
    inputs = FAMILIES["voxtral"].inputs(ROW)
    press = get_press("frame", layer=K)
    with torch.no_grad(), press(m, ratio=0.5):
        first = m.generate(**inputs, max_new_tokens=3, cache_implementation="static", **RETURN)
        cache = cache_of(first)
        # generate sizes the cache for one call (or larger, after a longer call on the same model)
        room = cache.layers[0].max_cache_len - (first.sequences.shape[1] - 1)  # the last token is not cached yet
        ids = torch.cat([first.sequences, first.sequences[:, -1:].repeat(1, room + 1)], dim=1)
        expected = rf"adds {room + 2} tokens to a pruned static cache that has room for {room} more.*max_cache_len=\.\.\.\) large"
        with pytest.raises(ValueError, match=expected):
            m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache, max_new_tokens=2, **GREEDY)


def test_a_reset_static_cache_prunes_the_next_prompt_afresh():
    m = model("qwen2_audio", "sdpa")
    press = get_press("frame", layer=K, ratio=0.5)
    cache = StaticCache(config=m.config, max_cache_len=40)
    first, second = FAMILIES["qwen2_audio"].inputs(ROW, seed=1), FAMILIES["qwen2_audio"].inputs(TWO_ROWS[:1], seed=2)
    _generate(m, press, first, past_key_values=cache)
    cache.reset()
    reused = _generate(m, press, second, past_key_values=cache)
    fresh = _generate(m, press, second, past_key_values=StaticCache(config=m.config, max_cache_len=40))
    assert torch.equal(reused.sequences, fresh.sequences)
    assert cache_lengths(cache) == cache_lengths(cache_of(fresh))


def test_static_layers_of_other_kinds_are_refused_with_the_fix():
    m = model("voxtral", "sdpa")
    inputs = FAMILIES["voxtral"].inputs(ROW)
    cache = StaticCache(config=m.config, max_cache_len=40)
    cache.layers[N_LAYERS - 1] = StaticSlidingWindowLayer(max_cache_len=40, sliding_window=8)
    with pytest.raises(NotImplementedError, match=f"layer {N_LAYERS - 1} is a StaticSlidingWindowLayer.*dynamic cache"):
        _generate(m, get_press("frame", layer=K, ratio=0.5), inputs, past_key_values=cache)


def test_a_press_is_checked_against_the_static_cache_as_one_that_prunes_when_asked():
    """``validate_press(..., prunes=True)``, as the sweep checks each method apart from its ratio: the press
    built at ratio 0 meets the refusal a pruning press meets on Gemma-3n's static cache; ``prunes=False``
    and the press's own (None, at 0: it prunes nothing) let it by."""
    m = model("gemma3n", "sdpa")
    unpruned = get_press("frame", layer=K)
    validate_press(m, unpruned, static=True)
    validate_press(m, unpruned.with_ratio(0.5), static=True, prunes=False)
    for press, prunes in ((unpruned, True), (unpruned.with_ratio(0.5), None)):
        with refused("gemma3n"):
            validate_press(m, press, static=True, prunes=prunes)


@pytest.mark.parametrize("family,press_name", [("qwen2_5_omni", "fastv"), ("voxtral", "frame+knorm"), ("qwen2_audio", "dart")])
def test_decode_step_compiles_into_one_graph(family, press_name):
    """``generate``'s own compilation (forced on the CPU), with ``fullgraph=True``: any graph break in a
    decode step, the engine's hooks and the attention recorder included, raises. The aot_eager backend
    traces and functionalises like inductor (the in-place cache writes included) without compiling
    kernels, so it takes seconds. Phi-4-multimodal and the Aero-1 stand-in are left out: their own
    forward branches on tensor values (whether the input holds audio tokens) in every step, stock HF
    static included."""
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs(TWO_ROWS)
    press = PRESSES[press_name]
    compile_config = CompileConfig(fullgraph=True, backend="aot_eager", mode=None)
    compile_config._compile_all_devices = True  # transformers compiles on GPUs only unless told
    torch._dynamo.reset()
    m.__dict__.pop("_compiled_call", None)
    try:
        compiled = _generate(m, press, inputs, cache_implementation="static", compile_config=compile_config)
        assert "_compiled_call" in m.__dict__, "generate compiled its decode step"
    finally:
        m.__dict__.pop("_compiled_call", None)  # the model is shared with other tests
        torch._dynamo.reset()
    assert torch.equal(compiled.sequences, _generate(m, press, inputs).sequences)


def test_bench_decode_script_runs_tiny(tmp_path, monkeypatch):
    script = load_script("bench_decode", monkeypatch)
    script.main(["--tiny", "--out", str(tmp_path), "--audio-seconds", "5", "--new-tokens", "4", "--repeats", "1", "--ratios", "0.5"])
    with open(tmp_path / "decode.csv") as file:
        rows = list(csv.DictReader(file))
    assert [(r["run"], r["cache"]) for r in rows] == [
        ("stock", "dynamic"), ("stock", "static"), ("fastv@0.5", "dynamic"), ("fastv@0.5", "static")
    ]
    assert all(int(r["new_tokens"]) == 4 for r in rows)
    static = [r for r in rows if r["cache"] == "static"]
    assert all(int(r["tokens_agree"]) == 4 and float(r["max_logit_diff"]) < 1e-4 for r in static)
    assert float(static[1]["kv_cache_mib"]) < float(static[0]["kv_cache_mib"]), "the pruned static cache is smaller"
    assert "| fastv@0.5 | static |" in (tmp_path / "decode.md").read_text()
