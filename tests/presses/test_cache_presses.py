"""The cache presses on every model family, under sdpa and eager: what they keep equals references
written from the papers' definitions (attention from an eager run), audio scope never evicts text
or markers and gives every clip its share, ratio 0 changes nothing, decoding on the compressed cache
equals a recompute without cache, and a padded batch equals its rows run alone."""

from __future__ import annotations

import pytest
import torch

from kvprune import ComposedPress, FramePress, get_press, list_presses, parse_method
from kvprune.engine.cache_budgets import pyramid_keep, top_per_group, top_per_group_headwise
from kvprune.keep_rules import keep_count
from tests.support import cache_reference as ref
from tests.support.helpers import ATTENTION, GREEDY, K, FixedPress, cache_layers, cache_of, kv_sources, model, single_row
from tests.support.tiny_models import FAMILIES, N_LAYERS

FAMILY_NAMES = list(FAMILIES)
WINDOW = 4  # every prompt below ends with at least 5 text tokens: the window is text
# two clips of different lengths in the first row, one in the second, left padding on the second
ROWS = ref.freeze([
    [("text", 4), ("audio", 16), ("text", 3), ("audio", 8), ("text", 5)],
    [("text", 6), ("audio", 12), ("text", 5)],
])
CACHE_PRESSES = ["knorm", "random_kv", "tova", "snapkv", "streaming_llm", "expected_attention", "pyramidkv", "adakv"]
SCORED = {  # the presses whose choice a reference recomputes, with the reference's scores
    "knorm": lambda family, p, b, j: ref.knorm_scores(p, b, j),
    "tova": lambda family, p, b, j: ref.tova_scores(p, b, j),
    "snapkv": lambda family, p, b, j: ref.snapkv_scores(p.attentions[j][b], p.keys[j].shape[1], WINDOW),
    "expected_attention": lambda family, p, b, j: ref.expected_attention_scores(family, p, b, j),
}
SCORED["pyramidkv"] = SCORED["adakv"] = SCORED["snapkv"]  # their default scorer


def press_of(name: str, ratio: float, **params):
    return get_press(name, ratio=ratio, window=WINDOW, **params)


def pressed_cache(family, attn, press, rows=ROWS, seed=0):
    inputs = FAMILIES[family].inputs([list(r) for r in rows], seed=seed)
    with torch.no_grad(), press(model(family, attn)) as outcome:
        cache = cache_of(model(family, attn)(**inputs, use_cache=True))
    return cache, outcome


def budgets_at(name: str, clips, ratio: float, layer_idx: int, n_cache_layers: int) -> list[int]:
    """Per clip, what layer ``layer_idx`` keeps; PyramidKV's budgets fall over the compressed layers
    1 .. n_cache_layers - 1 (layers reusing another's cache compress nothing)."""
    if name == "pyramidkv":
        return [pyramid_keep(len(c), keep_count(len(c), ratio), layer_idx - 1, n_cache_layers - 1, 20) for c in clips]
    return ref.uniform_budgets(clips, ratio)


def streaming_keep(clips, budgets, sinks=4) -> set[int]:
    return {q for clip, k in zip(clips, budgets) for q in clip[: min(k, sinks)] + clip[len(clip) - max(0, k - sinks) :]}


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("name", [n for n in CACHE_PRESSES if n != "random_kv"])
def test_kept_entries_equal_the_reference(name, family, attn):
    ratio = 0.6
    prefill = ref.prefill(family, attn, ROWS)
    cache, outcome = pressed_cache(family, attn, press_of(name, ratio))
    assert sorted(outcome.layer_stats) == list(range(1, cache_layers(family)))
    for j in range(1, cache_layers(family)):
        held = ref.cached_positions(cache.layers[j].keys, prefill.keys[j], prefill.valid)
        for b in range(len(ROWS)):
            clips, fixed = ref.audio_scope(prefill, b)
            budgets = budgets_at(name, clips, ratio, j, cache_layers(family))
            if name == "streaming_llm":
                expected = [fixed | streaming_keep(clips, budgets)] * len(held[b])
            elif name == "adakv":
                expected = ref.headwise_keep(SCORED[name](family, prefill, b, j), clips, budgets, fixed, 0.2)
            else:
                expected = [ref.layerwise_keep(SCORED[name](family, prefill, b, j), clips, budgets, fixed)] * len(held[b])
            assert held[b] == expected, f"layer {j} row {b}"
            for head in held[b]:
                assert fixed <= head, "text and markers are never evicted"
            per_head = [[len(head & set(clip)) for clip in clips] for head in held[b]]
            if name == "adakv":  # head-wise: the heads together keep the layer's budget of every clip
                assert [sum(column) for column in zip(*per_head)] == [len(held[b]) * k for k in budgets]
            else:
                assert per_head == [budgets] * len(held[b]), "every clip keeps its own share"
            assert outcome.layer_stats[j][b].kept_tokens == sum(budgets)
            assert outcome.layer_stats[j][b].audio_tokens == sum(len(c) for c in clips)


@pytest.mark.parametrize("name", ["knorm", "snapkv", "tova"])
@pytest.mark.parametrize("family", ["qwen2_5_omni", "voxtral"])
def test_prompt_scope_compresses_all_but_the_header_and_the_window(name, family):
    ratio, attn = 0.5, "sdpa"
    prefill = ref.prefill(family, attn, ROWS)
    cache, outcome = pressed_cache(family, attn, press_of(name, ratio, scope="prompt"))
    for j in range(1, N_LAYERS):
        held = ref.cached_positions(cache.layers[j].keys, prefill.keys[j], prefill.valid)
        for b in range(len(ROWS)):
            groups, fixed = ref.prompt_scope(prefill, b, WINDOW)
            budgets = [keep_count(len(groups[0]), ratio)]
            expected = ref.layerwise_keep(SCORED[name](family, prefill, b, j), groups, budgets, fixed)
            assert held[b] == [expected] * len(held[b]), f"layer {j} row {b}"
            assert outcome.layer_stats[j][b].audio_tokens == len(groups[0])


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("name", CACHE_PRESSES)
def test_ratio_zero_is_bit_identical(name, attn):
    family = FAMILY_NAMES[CACHE_PRESSES.index(name) % len(FAMILY_NAMES)]
    m = model(family, attn)
    inputs = FAMILIES[family].inputs([list(r) for r in ROWS])
    with torch.no_grad():
        logits, tokens = m(**inputs).logits, m.generate(**inputs, max_new_tokens=4, **GREEDY)
        with press_of(name, 0.0)(m) as outcome:
            pressed_logits, pressed_tokens = m(**inputs).logits, m.generate(**inputs, max_new_tokens=4, **GREEDY)
    assert torch.equal(pressed_logits, logits) and torch.equal(pressed_tokens, tokens)
    assert outcome.layer_stats == {}


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("name", CACHE_PRESSES)
def test_cached_decoding_equals_recompute_with_the_same_eviction(name, attn):
    family = FAMILY_NAMES[(CACHE_PRESSES.index(name) + 2) % len(FAMILY_NAMES)]
    rows = ROWS[:1]
    m = model(family, attn)
    inputs = FAMILIES[family].inputs([list(r) for r in rows])
    prompt_len = inputs["input_ids"].shape[1]
    prefill = ref.prefill(family, attn, rows)
    with torch.no_grad(), press_of(name, 0.6)(m):
        out = m.generate(**inputs, max_new_tokens=3, output_logits=True, return_dict_in_generate=True, **GREEDY)
        follow_up = torch.randint(10, 90, (1, 4), generator=torch.Generator().manual_seed(7))
        ids = torch.cat([out.sequences, follow_up], dim=1)
        second = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache_of(out),
                            max_new_tokens=2, output_logits=True, return_dict_in_generate=True, **GREEDY)
    cache = cache_of(second)
    kept = {j: ref.cached_positions(cache.layers[j].keys, prefill.keys[j], prefill.valid)[0] for j in range(1, cache_layers(family))}
    kept.update({j: kept[source] for j, source in kv_sources(family).items()})  # they attend to their source's cache
    assert any(len(kept[j][0]) < prompt_len for j in kept)
    steps = [(out.sequences, out.logits, prompt_len), (second.sequences, second.logits, ids.shape[1])]
    for sequences, logits, start in steps:  # the first turn, then a second turn on the same cache
        for step, step_logits in enumerate(logits):
            seq = sequences[:, : start + step]
            recomputed = ref.recompute_with_eviction(m, attn, inputs, seq, kept, prompt_len)
            torch.testing.assert_close(recomputed, step_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("name", CACHE_PRESSES)
def test_padded_batch_equals_one_row_at_a_time(name, attn):
    family = FAMILY_NAMES[(CACHE_PRESSES.index(name) + 1) % len(FAMILY_NAMES)]
    m = model(family, attn)
    fam = FAMILIES[family]
    rows = [list(r) for r in ROWS]
    press = press_of(name, 0.6)
    batch = fam.inputs(rows, seed=3)
    with torch.no_grad(), press(m) as outcome:
        together = m.generate(**batch, max_new_tokens=4, **GREEDY)
    stats_together = outcome.layer_stats
    width = batch["input_ids"].shape[1]
    for b in range(len(rows)):
        alone = single_row(fam, rows, b, seed=3)
        with torch.no_grad(), press(m) as outcome:
            tokens = m.generate(**alone, max_new_tokens=4, **GREEDY)
        assert torch.equal(tokens[0, alone["input_ids"].shape[1] :], together[b, width:])
        assert {j: s[0] for j, s in outcome.layer_stats.items()} == {j: s[b] for j, s in stats_together.items()}


def test_random_kv_is_seeded_per_sample():
    family, attn, ratio = "qwen2_audio", "sdpa", 0.5
    rows = ROWS[:1]

    def held(seed=0, press_seed=0):
        prefill = ref.prefill(family, attn, rows, seed)
        cache, _ = pressed_cache(family, attn, press_of("random_kv", ratio, seed=press_seed), rows, seed)
        return [ref.cached_positions(cache.layers[j].keys, prefill.keys[j], prefill.valid)[0][0] for j in range(1, N_LAYERS)]

    first = held()
    assert held() == first, "the same prompt gives the same choice"
    assert held(seed=1) != first, "another prompt of the same shape gives another choice"
    assert held(press_seed=1) != first, "the press's seed changes the choice"
    assert first[0] != first[1], "every layer draws its own sample"
    prefill = ref.prefill(family, attn, rows)
    clips, fixed = ref.audio_scope(prefill, 0)
    for kept in first:
        assert fixed <= kept and [len(kept & set(c)) for c in clips] == ref.uniform_budgets(clips, ratio)


def test_token_dropping_composed_with_snapkv():
    family, attn, ratio = "aero", "eager", 0.5
    m = model(family, attn)
    inputs = FAMILIES[family].inputs([list(r) for r in ROWS])
    with torch.no_grad(), ComposedPress([FramePress(ratio=0.5, layer=K), press_of("snapkv", ratio)])(m) as outcome:
        cache = cache_of(m(**inputs, use_cache=True))
    # reference: the same token dropping alone, with eager attention weights, then SnapKV by hand
    full = ref.prefill(family, attn, ROWS)
    pads = [int((~valid).sum()) for valid in full.valid]
    with torch.no_grad(), FixedPress(ratio=0.5, layer=K, positions=[k + pad for k, pad in zip(outcome.kept_positions, pads)])(m):
        dropped = m(**inputs, use_cache=True, output_attentions=True)
    for j in range(1, N_LAYERS):
        keys = cache_of(dropped).layers[j].keys
        slots = torch.arange(keys.shape[2])
        valid = full.valid.clone()
        for b in range(len(ROWS)):
            # the padded prompt position of each slot (layers >= K hold the kept tokens, filler first)
            position = slots if j < K else _dropped_positions(full, b, outcome.kept_positions[b] + pads[b], len(slots))
            if j >= K:
                valid[b, : len(slots)] = (position >= 0) & full.valid[b, position.clamp(min=0)]
            clips = [[int(s) for s in slots if int(position[s]) in clip] for clip in full.clips(b)]
            audio = {s for clip in clips for s in clip}
            fixed = {int(s) for s in slots if valid[b, s] and int(s) not in audio}
            scores = ref.snapkv_scores(dropped.attentions[j][b], keys.shape[1], WINDOW)
            expected = ref.layerwise_keep(scores, clips, ref.uniform_budgets(clips, ratio), fixed)
            held = ref.cached_positions(cache.layers[j].keys, keys, valid[:, : len(slots)])[b]
            assert held == [expected] * len(held), f"layer {j} row {b}"


def _dropped_positions(full, b, kept_audio, width) -> torch.Tensor:
    """Per slot of a token-dropped layer, the padded prompt position it holds (-1: filler)."""
    ids = full.inputs["input_ids"][b]
    audio = ids == ref.AUDIO
    positions = torch.arange(len(ids))
    held = positions[~audio | torch.isin(positions, kept_audio)]
    return torch.cat([torch.full((width - len(held),), -1), held])


def test_pyramid_budgets_sum_to_the_uniform_total():
    for n in (1, 2, 7, 16, 300):
        for ratio in (0.1, 0.5, 0.9):
            k = keep_count(n, ratio)
            for layers in (1, 2, 3, 27):
                for beta in (1, 5, 20):
                    budgets = [pyramid_keep(n, k, d, layers, beta) for d in range(layers)]
                    assert sum(budgets) == layers * k, (n, ratio, layers, beta)
                    assert all(1 <= x <= n for x in budgets)
                    assert budgets[0] >= budgets[-1], "budgets shrink with depth"
    m = model("voxtral", "sdpa")
    inputs = FAMILIES["voxtral"].inputs([list(r) for r in ROWS])
    for spec in ("pyramidkv:press=tova", "pyramidkv:press=knorm,beta=4"):
        with torch.no_grad(), parse_method(spec).build(0.7)(m) as outcome:
            m(**inputs, use_cache=True)
        for b in range(len(ROWS)):
            uniform = sum(keep_count(n, 0.7) for n in ([16, 8] if b == 0 else [12]))
            assert sum(outcome.layer_stats[j][b].kept_tokens for j in outcome.layer_stats) == uniform * (N_LAYERS - 1)
            assert outcome.layer_stats[1][b].kept_tokens > outcome.layer_stats[N_LAYERS - 1][b].kept_tokens


@pytest.mark.parametrize("name", ["pyramidkv", "adakv"])
def test_the_wrapped_press_keeps_its_own_parameters(name):
    """A budget policy keeps what its inner press, at that press's own parameters, scores best under the
    policy's budgets (computed here); other parameters keep other entries."""
    family, attn, ratio, own = "qwen2_audio", "sdpa", 0.6, dict(kernel=3, pool="max")
    prefill = ref.prefill(family, attn, ROWS)
    press = parse_method(f"{name}:window={WINDOW},press=snapkv(kernel=3,pool=max)").build(ratio)
    cache, _ = pressed_cache(family, attn, press)
    differs = False
    for j in range(1, cache_layers(family)):
        held = ref.cached_positions(cache.layers[j].keys, prefill.keys[j], prefill.valid)
        for b in range(len(ROWS)):
            clips, fixed = ref.audio_scope(prefill, b)
            budgets = budgets_at(name, clips, ratio, j, cache_layers(family))

            def kept(**params):
                scores = ref.snapkv_scores(prefill.attentions[j][b], prefill.keys[j].shape[1], WINDOW, **params)
                if name == "adakv":
                    return ref.headwise_keep(scores, clips, budgets, fixed, 0.2)
                return [ref.layerwise_keep(scores, clips, budgets, fixed)] * len(held[b])

            assert held[b] == kept(**own), f"layer {j} row {b}"
            differs |= kept(**own) != kept()
    assert differs, "the inner press's kernel and pool change what is kept"


def test_selection_keeps_each_groups_budget_and_ties_go_to_the_earlier_entry():
    scores = torch.tensor([[1.0, 3.0, 3.0, 0.0, 2.0, 2.0, 5.0]])
    groups = torch.tensor([[-1, 0, 0, 0, 1, 1, -1]])
    assert top_per_group(scores, groups, torch.tensor([[1, 1]])).tolist() == [[True, True, False, False, True, False, True]]
    per_head = torch.tensor([[[9.0, 1.0, 2.0, 3.0], [0.0, 0.5, 0.4, 0.3]]])
    keep = top_per_group_headwise(per_head, torch.tensor([[-1, 0, 0, 0]]), torch.tensor([[2]]), safeguard=0.5)
    # each head is guaranteed its best entry; the other 2 of the 2 x 2 slots go to the best pairs: head 0's
    assert keep.tolist() == [[[True, True, True, True], [True, True, False, False]]]
    assert int(keep[..., 1:].sum()) == 2 * 2


def test_specs_name_cache_presses_and_their_compositions():
    assert list_presses(kind="cache") == CACHE_PRESSES
    for text in ("pyramidkv:press=tova", "frame+snapkv:window=32", "adakv:press=knorm,safeguard=0.5",
                 "knorm:scope=prompt", "snapkv:kernel=7,pool=max", "random_kv:seed=3", "streaming_llm:sinks=2"):
        spec = parse_method(text)
        assert spec.label == text and parse_method(spec.label) == spec
    assert parse_method("pyramidkv:press=snapkv,beta=20").label == "pyramidkv"
    assert parse_method("pyramidkv:press=tova").build(0.5).scoring_press == get_press("tova", ratio=0.5)
    for bad, message in [("pyramidkv:press=fastv", "not FastVPress"), ("knorm:scope=all", "scope='all' is invalid"),
                         ("snapkv:kernel=4", "must be odd"), ("snapkv:pool=median", "pool='median' is invalid"),
                         ("knorm:window=0", "window=0 is invalid"), ("pyramidkv:beta=0", "beta=0 is invalid")]:
        with pytest.raises(ValueError, match=message):
            parse_method(bad)


def test_compositions_the_engine_refuses():
    m = model("qwen2_audio", "sdpa")
    with pytest.raises(ValueError, match="share one scope"):
        ComposedPress([get_press("knorm", ratio=0.5), get_press("tova", ratio=0.5, scope="prompt")])(m)
    with pytest.raises(ValueError, match="head-wise"):
        ComposedPress([get_press("adakv", ratio=0.5), get_press("knorm", ratio=0.5)])(m)
    from kvprune.engine.press_plan import _check_cache_presses
    with pytest.raises(NotImplementedError, match="flash attention"):
        _check_cache_presses([get_press("adakv", ratio=0.5)], "flash_attention_2")
