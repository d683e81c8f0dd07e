"""Two lanes decode the same tokens as one decode state holding every row (the lanes' split of the rows, prefilled
batches that straddle the split, kept states of each lane), under token, cache and head-wise presses."""

from __future__ import annotations

import pytest
import torch

from kvprune import AdaKVPress, FastVPress, Generator, KNormPress
from kvprune.generation.lanes import Lanes, prefill_rows
from kvprune.generation.prefill import run_prefill
from tests.support.helpers import GREEDY, model
from tests.support.tiny_models import FAMILIES

NO_STOP = dict(pad_token_id=GREEDY["pad_token_id"], suppress_tokens=GREEDY["suppress_tokens"], eos_token_id=[])
FAMILY = "qwen2_5_omni"
PRESSES = {"none": None, "fastv": FastVPress(layer=2, ratio=0.5), "knorm": KNormPress(ratio=0.4),
           "adakv": AdaKVPress(ratio=0.5)}


def batches(sizes: list[int]) -> list[dict]:
    """Prefilled batches of the given row counts, each row a prompt of its own length."""
    made, row = [], 0
    for size in sizes:
        rows = [[("text", 3), ("audio", 6 + 5 * (row + i)), ("text", 2 + i % 3)] for i in range(size)]
        made.append(FAMILIES[FAMILY].inputs(rows))
        row += size
    return made


def test_lanes_split_the_rows_in_two_from_the_threshold():
    assert Lanes.of(7, None).bounds == (0, 7)
    assert Lanes.of(7, 8).bounds == (0, 7)
    assert Lanes.of(7, 7).bounds == (0, 4, 7)
    assert Lanes.of(1, 1).bounds == (0, 1)  # one row is never split
    lanes = Lanes.of(7, 2)
    assert [lanes.rows(lane) for lane in range(lanes.count)] == [4, 3]
    # a batch of rows 2..6 of the call: rows 0-1 of it go to lane 0 from its row 2, rows 2-4 to lane 1 from its row 0
    assert list(lanes.parts(2, 5)) == [(0, slice(0, 2), 2), (1, slice(2, 5), 0)]
    assert list(lanes.parts(4, 3)) == [(1, slice(0, 3), 0)]


@pytest.mark.usefixtures("one_thread")
def test_prefill_rows_are_the_rows_of_the_prefill():
    m = model(FAMILY, "sdpa")
    (inputs,) = batches([3])
    prefill = run_prefill(FAMILIES[FAMILY].family.entry(m), inputs, FastVPress(layer=2, ratio=0.5))
    part = prefill_rows(prefill, slice(1, 3))
    assert torch.equal(part.logits, prefill.logits[1:3])
    assert torch.equal(part.next_positions, prefill.next_positions[..., 1:3, :])
    for whole, rows in zip(prefill.layers, part.layers):
        assert torch.equal(rows.keys, whole.keys[1:3]) and torch.equal(rows.valid, whole.valid[1:3])
        assert rows.slots is whole.slots  # layers stay grouped as the prefill grouped them


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("press", PRESSES, ids=list(PRESSES))
@pytest.mark.parametrize("sizes", [[5], [2, 3], [1, 3, 1]], ids=["one-batch", "straddling", "three-batches"])
def test_two_lanes_decode_the_tokens_of_one_state(press, sizes):
    m = model(FAMILY, "sdpa")
    inputs = batches(sizes)
    one = Generator(m, overlap_rows=None).generate(inputs, max_new_tokens=6, press=PRESSES[press], **NO_STOP)
    two = Generator(m, overlap_rows=2)
    first = two.generate(inputs, max_new_tokens=6, press=PRESSES[press], **NO_STOP)
    again = two.generate(inputs, max_new_tokens=6, press=PRESSES[press], **NO_STOP)  # each lane's kept state refilled
    assert (one.lanes, first.lanes, again.lanes) == (1, 2, 2)
    assert torch.equal(first.new_tokens, one.new_tokens) and torch.equal(again.new_tokens, one.new_tokens)
    assert torch.equal(first.sequences, one.sequences)
    assert not again.new_state and two.states == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="lanes run at once on CUDA streams, replaying CUDA graphs")
@pytest.mark.parametrize("press", ["none", "fastv"])
def test_on_cuda_the_lanes_replay_their_graphs_at_once_and_decode_the_tokens_of_one_state(press):
    m = FAMILIES[FAMILY].build("sdpa").cuda()
    inputs = [{k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in batch.items()} for batch in batches([3, 3])]
    one = Generator(m, overlap_rows=None).generate(inputs, max_new_tokens=24, press=PRESSES[press], **NO_STOP)
    two = Generator(m, overlap_rows=2)
    out = two.generate(inputs, max_new_tokens=24, press=PRESSES[press], **NO_STOP)
    assert out.lanes == 2 and two.captures == 2 and two.fallbacks == {}
    assert torch.equal(out.new_tokens, one.new_tokens)
