"""Cache presses (KNorm) alone and composed with token dropping, checked against caches built by hand."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from kvprune import ComposedPress, DARTPress, KNormPress
from kvprune.keep_rules import keep_count
from tests.support.helpers import GREEDY, K, FixedPress, cache_lengths, cache_of, model, n_layers, single_row
from tests.support.tiny_models import AUDIO, FAMILIES

FAMILY_NAMES = list(FAMILIES)
ROW = [[("text", 4), ("audio", 16), ("text", 3), ("audio", 8), ("text", 5)]]
TWO_ROWS = [[("text", 3), ("audio", 12), ("text", 4)], [("text", 5), ("audio", 20), ("text", 3)]]


def _prefill_cache(m, inputs):
    with torch.no_grad():
        return cache_of(m(**inputs, use_cache=True))


def _knorm_keep(keys: torch.Tensor, audio: torch.Tensor, ratio: float) -> torch.Tensor:
    """Indices a KNorm press must keep in one row of one layer: all text, and in every run of audio
    entries (a clip) its share of the lowest-norm keys."""
    norms = keys.float().norm(dim=-1).mean(dim=0)  # (L,) averaged over heads
    kept = [(~audio).nonzero().flatten()]
    entries = audio.nonzero().flatten()
    for clip in torch.tensor_split(entries, ((entries[1:] - entries[:-1]) > 1).nonzero().flatten().add(1).tolist()):
        kept.append(clip[norms[clip].argsort()[: keep_count(len(clip), ratio)]])
    return torch.cat(kept).sort().values


def _generate_two(m, inputs):
    """Prefill plus one decoding step; returns (prefill cache entries, first token, decode-step logits)."""
    with torch.no_grad():
        out = m.generate(**inputs, max_new_tokens=2, output_logits=True, return_dict_in_generate=True, **GREEDY)
    width = inputs["input_ids"].shape[1]
    return cache_of(out), out.sequences[:, width : width + 1], out.logits[1]


def _decode_on(m, cache, ids, token):
    """The decode-step logits of ``token`` on a cache built by hand, through generate, with no press."""
    seq = torch.cat([ids, token], dim=1)
    with torch.no_grad():
        out = m.generate(input_ids=seq, attention_mask=torch.ones_like(seq), past_key_values=cache, max_new_tokens=1,
                         output_logits=True, return_dict_in_generate=True, **GREEDY)
    return out.logits[0]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_knorm_evicts_the_largest_norm_audio_keys_and_decoding_uses_what_is_left(family):
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs(ROW)
    ids = inputs["input_ids"]
    full = _prefill_cache(m, inputs)
    with KNormPress(ratio=0.5)(m) as outcome:
        pressed, token, logits = _generate_two(m, inputs)

    audio = ids[0] == AUDIO
    reference = DynamicCache()
    for j, layer in enumerate(full.layers):
        if layer.keys is None:
            continue  # it attends to an earlier layer's cache (Gemma-3n's last layers)
        keep = torch.arange(ids.shape[1]) if j == 0 else _knorm_keep(layer.keys[0], audio, 0.5)
        assert torch.equal(pressed.layers[j].keys[0, :, :-1], layer.keys[0][:, keep]), f"layer {j}"
        assert torch.equal(pressed.layers[j].values[0, :, :-1], layer.values[0][:, keep])
        reference.update(layer.keys[:, :, keep], layer.values[:, :, keep], j)
        if j:
            n_audio = int(audio.sum())
            assert outcome.layer_stats[j][0].kept_tokens == keep_count(n_audio, 0.5)
    assert [(s.audio_tokens, s.kept_tokens) for s in outcome.stats] == [(int(audio.sum()), int(audio.sum()))], "no token is dropped"
    # no hooks here: one sequence, sdpa, no padding needs no mask, so HF decodes on the ragged cache as is
    torch.testing.assert_close(logits, _decode_on(m, reference, ids, token), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_knorm_in_a_padded_batch_keeps_its_counts_per_row(family, attn):
    rows = TWO_ROWS
    m = model(family, attn)
    inputs = FAMILIES[family].inputs(rows)
    press = KNormPress(ratio=0.75, layer=2)
    with torch.no_grad(), press(m) as outcome:
        out = m.generate(**inputs, max_new_tokens=3, return_dict_in_generate=True, **GREEDY)
    audio = [FAMILIES[family].audio_tokens(row) for row in rows]
    width, steps, layers = inputs["input_ids"].shape[1], 2, n_layers(family)
    kept = [keep_count(a, 0.75) for a in audio]
    sharing = FAMILIES[family].family.structure.layer_io.kv_sources(FAMILIES[family].config.get_text_config())
    assert sorted(outcome.layer_stats) == [j for j in range(2, layers) if j not in sharing]
    assert [s.kept_tokens for s in outcome.layer_stats[2]] == kept
    lengths = cache_lengths(cache_of(out), family)
    assert lengths[:2] == [width + steps] * 2
    assert lengths[2:] == [width - min(a - k for a, k in zip(audio, kept)) + steps] * (layers - 2)
    # the same rows one at a time give the same tokens
    for b in range(len(rows)):
        single = single_row(FAMILIES[family], rows, b, seed=0)
        with torch.no_grad(), press(m):
            alone = m.generate(**single, max_new_tokens=3, **GREEDY)
        assert torch.equal(alone[0, single["input_ids"].shape[1]:], out.sequences[b, width:])


def test_token_dropping_composed_with_knorm():
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs(ROW)
    ids = inputs["input_ids"]
    with ComposedPress([DARTPress(ratio=0.5, layer=K), KNormPress(ratio=0.5)])(m) as outcome:
        pressed, token, logits = _generate_two(m, inputs)
    # reference: the same token dropping alone, then KNorm applied by hand to each layer's cache
    fixed = FixedPress(ratio=0.5, layer=K, positions=outcome.kept_positions)
    with torch.no_grad(), fixed(m):
        dropped = cache_of(m(**inputs, use_cache=True))
    audio_positions = (ids[0] == AUDIO).nonzero().flatten()
    reference = DynamicCache()
    for j, layer in enumerate(dropped.layers):
        if j == 0:
            keep = torch.arange(layer.keys.shape[2])
        else:
            positions = torch.arange(ids.shape[1])
            held = positions if j < K else positions[(ids[0] != AUDIO) | torch.isin(positions, outcome.kept_positions[0])]
            keep = _knorm_keep(layer.keys[0], torch.isin(held, audio_positions), 0.5)
        assert torch.equal(pressed.layers[j].keys[0, :, :-1], layer.keys[0][:, keep]), f"layer {j}"
        reference.update(layer.keys[:, :, keep], layer.values[:, :, keep], j)
    torch.testing.assert_close(logits, _decode_on(m, reference, ids, token), rtol=1e-5, atol=1e-5)


def test_composition_at_ratio_zero_is_bit_identical():
    m = model("voxtral", "eager")
    inputs = FAMILIES["voxtral"].inputs(TWO_ROWS)
    with torch.no_grad():
        reference = m.generate(**inputs, max_new_tokens=4, **GREEDY)
        with ComposedPress([DARTPress(ratio=0.0), KNormPress(ratio=0.0)])(m):
            tokens = m.generate(**inputs, max_new_tokens=4, **GREEDY)
    assert torch.equal(tokens, reference)


def test_composition_refuses_two_token_droppers_and_a_shared_ratio():
    m = model("voxtral", "sdpa")
    with pytest.raises(ValueError, match="at most one token-dropping press"):
        ComposedPress([DARTPress(ratio=0.5), DARTPress(ratio=0.2)])(m)
    with pytest.raises(ValueError, match="no single ratio"):
        ComposedPress([KNormPress(ratio=0.5)])(m, ratio=0.3)
    with pytest.raises(ValueError, match="layer=0 is invalid"):
        KNormPress(ratio=0.5, layer=0)(m)
