"""The engine's small parts on hand-made inputs: clip finding, kept counts, slots and masks."""

from __future__ import annotations

import pytest
import torch

from kvprune import ComposedPress, FastVPress, FramePress, KNormPress
from kvprune.engine.attention_probe import key_validity, last_query_attention
from kvprune.engine.clips import find_clips
from kvprune.engine.masks import restrict_mask
from kvprune.keep_rules import keep_count
from kvprune.engine.slots import SlotMap

A = 9


def slots_of(keep: torch.Tensor) -> SlotMap:
    """The slots of a (B, S) keep mask, as the engine lays them out."""
    return SlotMap.from_rows([row.nonzero().flatten() for row in keep.bool()], prompt_len=keep.shape[1])


@pytest.mark.parametrize(
    "n,ratio,expected",
    [(10, 0.25, 8), (10, 0.35, 6), (10, 0.5, 5), (3, 0.9, 1), (1, 0.99, 1), (7499, 0.9, 750), (12, 0.0, 12)],
)
def test_keep_count_uses_python_round_and_keeps_one(n, ratio, expected):
    # round(7.5) == 8 and round(6.5) == 6: Python rounds halves to even
    assert keep_count(n, ratio) == expected


@pytest.mark.parametrize("rule", ["round", "floor"])
def test_a_token_press_keeps_its_own_count(rule):
    """The engine asks the press how many of a clip's tokens stay (``keep``) and whether it removes
    anything at all (``prunes``); the ratio and keep rule are the press's alone."""
    press = FramePress(ratio=0.5, keep_rule=rule)
    assert [press.keep(n) for n in (1, 7, 10)] == [keep_count(n, 0.5, rule) for n in (1, 7, 10)]
    assert [press.keep(7) for press in (FramePress(ratio=0.5), FramePress(ratio=0.5, keep_rule="floor"))] == [4, 3]
    assert press.prunes and not FramePress(ratio=0.0).prunes


def test_a_composition_prunes_where_any_part_does():
    assert ComposedPress([FastVPress(ratio=0.0), KNormPress(ratio=0.3)]).prunes
    assert not ComposedPress([FastVPress(ratio=0.0), KNormPress(ratio=0.0)]).prunes


def test_find_clips_splits_runs_per_row():
    ids = torch.tensor([[1, A, A, 2, A, A, A, 3], [0, 0, 4, 5, A, A, A, A]])
    clips = find_clips(ids, A, lambda n: keep_count(n, 0.5))
    assert [(c.start, c.end, c.index, c.n_keep) for c in clips[0]] == [(1, 3, 0, 1), (4, 7, 1, 2)]
    assert [(c.start, c.end, c.index, c.n_keep) for c in clips[1]] == [(4, 8, 0, 2)]


def test_slot_map_puts_filler_on_the_left():
    keep = torch.tensor([[1, 1, 0, 1, 1], [0, 1, 0, 0, 1]], dtype=torch.bool)
    slots = slots_of(keep)
    assert slots.index.tolist() == [[0, 1, 3, 4], [0, 0, 1, 4]]
    assert slots.valid.tolist() == [[True] * 4, [False, False, True, True]]
    cols = slots.columns(7)
    assert cols.index.tolist() == [[0, 1, 3, 4, 5, 6], [0, 0, 1, 4, 5, 6]]
    assert cols.valid[1].tolist() == [False, False, True, True, True, True]


def _allowed_reference(keep_rows, keep_cols, pad):
    """Who may attend to whom after pruning, from first principles: causal in original positions,
    never to padding or filler, filler queries only to themselves."""
    batch, width = keep_rows.index.shape
    out = torch.zeros(batch, width, width, dtype=torch.bool)
    for b in range(batch):
        for i in range(width):
            for j in range(width):
                if not keep_rows.valid[b, i]:
                    out[b, i, j] = i == j
                    continue
                qi, kj = int(keep_rows.index[b, i]), int(keep_cols.index[b, j])
                out[b, i, j] = bool(keep_cols.valid[b, j]) and kj <= qi and kj >= pad[b]
    return out


@pytest.mark.parametrize("with_padding", [False, True])
def test_restricted_masks_agree_across_formats(with_padding):
    seq = 6
    pad = [0, 2] if with_padding else [0, 0]
    keep = torch.tensor([[1, 0, 1, 1, 0, 1], [1, 1, 0, 0, 0, 1]], dtype=torch.bool)  # 4 and 3 kept
    slots = slots_of(keep)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    not_pad = torch.tensor([[j >= p for j in range(seq)] for p in pad])
    bool_mask = (causal[None] & not_pad[:, None, :])[:, None]
    float_mask = torch.zeros(bool_mask.shape).masked_fill(~bool_mask, torch.finfo(torch.float32).min)
    expected = _allowed_reference(slots, slots, pad)

    sdpa = restrict_mask(bool_mask, cols=slots, rows=slots, query_index=slots.index, attn_implementation="sdpa", dtype=torch.float32)
    eager = restrict_mask(float_mask, cols=slots, rows=slots, query_index=slots.index, attn_implementation="eager", dtype=torch.float32)
    assert torch.equal(sdpa[:, 0], expected)
    assert torch.equal(eager[:, 0] == 0, expected)
    if not with_padding:  # HF passes None here under sdpa; the engine must build the same mask
        built = restrict_mask(None, cols=slots, rows=slots, query_index=slots.index, attn_implementation="sdpa", dtype=torch.float32)
        assert torch.equal(built[:, 0], expected)
        even = slots_of(keep[:1])  # no filler: HF's causal default still holds
        assert restrict_mask(None, cols=even, rows=even, query_index=even.index, attn_implementation="sdpa", dtype=torch.float32) is None


def test_decode_mask_hides_filler_and_keeps_new_tokens():
    keep = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 1]], dtype=torch.bool)
    slots = slots_of(keep)
    cols = slots.columns(6)  # two tokens decoded so far; the next query is position 5
    mask = restrict_mask(None, cols=slots.columns(6), rows=None, query_index=torch.tensor([[5]]), attn_implementation="sdpa", dtype=torch.float32)
    assert mask.shape == (2, 1, 1, 6)
    assert mask[:, 0, 0].tolist() == cols.valid.tolist()
    flash = restrict_mask(None, cols=cols, rows=None, query_index=torch.tensor([[5]]), attn_implementation="flash_attention_2", dtype=torch.float32)
    assert flash.tolist() == cols.valid.long().tolist()


def test_unknown_backend_is_refused():
    slots = slots_of(torch.tensor([[1, 1], [0, 1]], dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="flex_attention"):
        restrict_mask(None, cols=slots, rows=slots, query_index=slots.index, attn_implementation="flex_attention", dtype=torch.float32)


def test_last_query_attention_equals_softmax_row_of_full_matrix():
    torch.manual_seed(0)
    batch, heads, kv_heads, seq, dim = 2, 4, 2, 7, 8
    q, k = torch.randn(batch, heads, seq, dim), torch.randn(batch, kv_heads, seq, dim)
    valid = torch.ones(batch, seq, dtype=torch.bool)
    valid[1, :2] = False
    mask = valid[:, None, None, :] & torch.ones(seq, seq, dtype=torch.bool).tril()
    # reference: the whole attention matrix, repeated KV heads, then its last row
    full = (q @ k.repeat_interleave(heads // kv_heads, dim=1).transpose(-1, -2)) * dim**-0.5
    full = full.masked_fill(~mask, float("-inf")).softmax(-1)
    expected = full[:, :, -1].mean(1)
    torch.testing.assert_close(last_query_attention(q, k, mask, dim**-0.5), expected)
    assert key_validity(None, batch, seq, "cpu").all()


def test_unpruned_positions_are_every_position_but_the_candidates_in_order():
    """Made on the device from the candidates (a stable sort), with nothing copied from the host: the same
    positions, in the same order, as reading them off the host's copy."""
    from kvprune.engine.token_evidence import Evidence

    generator = torch.Generator().manual_seed(0)
    candidates = torch.rand(3, 41, generator=generator) < 0.7
    candidates[1] = False  # a row with nothing to prune
    candidates[2, :5] = True  # one that starts with candidates
    evidence = Evidence.for_prompt(candidates, torch.ones_like(candidates))
    positions = evidence.unpruned_positions()
    assert [p.dtype for p in positions] == [torch.long] * 3
    for row, got in zip(candidates, positions):
        assert torch.equal(got, (~row).nonzero().flatten())


def test_sample_keys_hash_each_rows_ids_without_its_padding():
    """A row's key is the 63-bit BLAKE2b hash of its unpadded ids as little-endian int64 bytes (written out here
    byte by byte), whatever the ids' dtype and however much padding the batch gave the row."""
    import hashlib
    import struct

    from kvprune.engine.token_evidence import sample_keys

    ids = torch.tensor([[5, 70_000, 3, 9], [0, 0, 5, 70_000], [0, 1, 2, 3]])
    valid = torch.tensor([[True, True, True, True], [False, False, True, True], [False, True, True, True]])

    def reference(row: list[int]) -> int:
        digest = hashlib.blake2b(b"".join(struct.pack("<q", i) for i in row), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1

    expected = (reference([5, 70_000, 3, 9]), reference([5, 70_000]), reference([1, 2, 3]))
    assert sample_keys(ids, valid) == expected
    assert sample_keys(ids.int(), valid) == expected
    assert sample_keys(ids[1:2, 2:], valid[1:2, 2:]) == expected[1:2]  # the same row alone, unpadded


def test_a_clips_take_is_its_positions_at_those_indices():
    from kvprune.engine.clips import Clip

    clip = Clip(row=0, index=1, spans=((3, 6), (9, 11), (20, 22)), n_keep=4)
    positions = [3, 4, 5, 9, 10, 20, 21]
    for indices in ([0, 3, 6], [6, 0, 4, 4], torch.tensor([5, 1])):
        taken = clip.take(indices)
        assert taken.dtype == torch.long and taken.device.type == "cpu"
        assert taken.tolist() == [positions[i] for i in list(indices)]
