"""The four token-dropping presses on every model family, under sdpa and eager attention."""

from __future__ import annotations

import pytest
import torch

from kvprune import get_press, list_presses
from kvprune.keep_rules import keep_count
from tests.support.helpers import ATTENTION, GREEDY, K, FixedPress, cache_lengths, cache_of, clip_positions, model, single_row
from tests.support.tiny_models import FAMILIES

FAMILY_NAMES = list(FAMILIES)
PRESSES = ["fastv", "random", "frame", "dart"]
# two clips in the first row, one in the second, of different lengths; left padding on the second
TWO_ROWS = [
    [("text", 3), ("audio", 12), ("text", 4), ("audio", 8), ("text", 5)],
    [("text", 5), ("audio", 16), ("text", 3)],
]
ONE_ROW = [[("text", 4), ("audio", 20), ("text", 3), ("audio", 8), ("text", 6)]]

matrix = pytest.mark.parametrize("family", FAMILY_NAMES)
backends = pytest.mark.parametrize("attn", ATTENTION)
presses = pytest.mark.parametrize("press_name", PRESSES)


def test_list_presses_names_the_four():
    assert list_presses(kind="token") == PRESSES


@matrix
@backends
@presses
def test_ratio_zero_is_bit_identical(family, attn, press_name):
    m = model(family, attn)
    inputs = FAMILIES[family].inputs(TWO_ROWS)
    with torch.no_grad():
        logits = m(**inputs).logits
        tokens = m.generate(**inputs, max_new_tokens=5, **GREEDY)
        with get_press(press_name, layer=K)(m, ratio=0.0) as outcome:
            pressed_logits = m(**inputs).logits
            pressed_tokens = m.generate(**inputs, max_new_tokens=5, **GREEDY)
    assert torch.equal(pressed_logits, logits)
    assert torch.equal(pressed_tokens, tokens)
    assert [s.kept_tokens for s in outcome.stats] == [s.audio_tokens for s in outcome.stats]


@matrix
@backends
@presses
def test_kept_counts_and_cache_lengths(family, attn, press_name):
    rows = TWO_ROWS
    m = model(family, attn)
    inputs = FAMILIES[family].inputs(rows)
    ratio = 0.3
    with torch.no_grad(), get_press(press_name, layer=K)(m, ratio=ratio) as outcome:
        out = m.generate(**inputs, max_new_tokens=4, return_dict_in_generate=True, **GREEDY)
    expected_kept = []
    for row, clips, kept in zip(rows, clip_positions(family, rows), outcome.kept_positions):
        assert torch.equal(kept, kept.unique()), "kept positions are sorted and unique"
        counts = [int(torch.isin(kept, c).sum()) for c in clips]
        assert counts == [keep_count(len(c), ratio) for c in clips]
        assert len(kept) == sum(counts), "only audio positions are reported"
        expected_kept.append(sum(counts))
    assert [s.kept_tokens for s in outcome.stats] == expected_kept
    assert [s.audio_tokens for s in outcome.stats] == [sum(len(c) for c in cl) for cl in clip_positions(family, rows)]

    width = inputs["input_ids"].shape[1]
    steps = out.sequences.shape[1] - width - 1  # the last new token is never fed back
    # rows drop different counts: pruned layers are as wide as the (padded) row that kept most
    pruned_width = width - min(s.audio_tokens - s.kept_tokens for s in outcome.stats)
    lengths = cache_lengths(cache_of(out), family)
    assert lengths[:K] == [width + steps] * K
    assert lengths[K:] == [pruned_width + steps] * (len(lengths) - K)


@matrix
@backends
@presses
def test_cached_decoding_equals_recompute_without_cache(family, attn, press_name):
    rows = ONE_ROW
    m = model(family, attn)
    inputs = FAMILIES[family].inputs(rows)
    with torch.no_grad(), get_press(press_name, layer=K)(m, ratio=0.5) as outcome:
        out = m.generate(**inputs, max_new_tokens=4, output_logits=True, return_dict_in_generate=True, **GREEDY)
    width = inputs["input_ids"].shape[1]
    fixed = FixedPress(ratio=0.5, layer=K, positions=outcome.kept_positions)
    for step, step_logits in enumerate(out.logits):
        ids = out.sequences[:, : width + step]
        recompute = dict(inputs, input_ids=ids, attention_mask=torch.ones_like(ids))
        with torch.no_grad(), fixed(m) as fixed_outcome:
            logits = m(**recompute, use_cache=False).logits[:, -1]
        torch.testing.assert_close(logits, step_logits, rtol=1e-4, atol=1e-4)
        assert torch.equal(fixed_outcome.kept_positions[0], outcome.kept_positions[0])


@matrix
@backends
@presses
def test_batch_with_padding_equals_one_row_at_a_time(family, attn, press_name):
    rows = TWO_ROWS
    m = model(family, attn)
    fam = FAMILIES[family]
    press = get_press(press_name, layer=K)
    batch = fam.inputs(rows, seed=3)
    with torch.no_grad(), press(m, ratio=0.5) as outcome:
        together = m.generate(**batch, max_new_tokens=5, **GREEDY)
    kept_together = outcome.kept_positions
    width = batch["input_ids"].shape[1]
    for b, row in enumerate(rows):
        alone = single_row(fam, rows, b, seed=3)
        with torch.no_grad(), press(m, ratio=0.5) as outcome:
            tokens = m.generate(**alone, max_new_tokens=5, **GREEDY)
        assert torch.equal(outcome.kept_positions[0], kept_together[b])
        assert torch.equal(tokens[0, alone["input_ids"].shape[1] :], together[b, width:])
