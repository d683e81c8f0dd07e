"""Microbenchmarks of kvprune's scoring path on a CPU, at the Qwen2.5-Omni-7B shape with 2 minutes
of audio (3,000 audio tokens). Skipped by the default test run; run them with

    python -m pytest tests/perf --benchmark-only
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from kvprune.harness.bench.presets import TEXT_AFTER, TEXT_BEFORE
from kvprune.harness.bench.scoring import ScoringInputs, select_slots

from kvprune import get_press
from kvprune.engine.attention_probe import last_query_attention
from kvprune.engine.masks import restrict_mask
from kvprune.engine.slots import SlotMap

AUDIO, TEXT = 7, 11
AUDIO_TOKENS = 3000  # 2 min at 25 tokens/s
HEADS, KV_HEADS, HEAD_DIM, HIDDEN = 28, 4, 128, 3584  # Qwen2.5-Omni-7B's text model
RATIO = 0.5


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def inputs() -> ScoringInputs:
    ids = torch.tensor([[TEXT] * TEXT_BEFORE + [AUDIO] * AUDIO_TOKENS + [TEXT] * TEXT_AFTER])
    return ScoringInputs.random(
        ids, AUDIO, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, hidden_size=HIDDEN, norm=nn.RMSNorm(HIDDEN)
    )


@pytest.fixture(scope="module")
def kept(inputs) -> torch.Tensor:
    """Every text token and every other audio token."""
    keep = ~inputs.is_audio
    clip = inputs.clip(get_press("fastv", ratio=RATIO))
    keep[0, clip.start : clip.end : 2] = True
    return keep


def test_last_query_attention(benchmark, inputs):
    scores = benchmark(last_query_attention, inputs.query, inputs.key, None, inputs.scaling)
    assert scores.shape == inputs.input_ids.shape


@pytest.mark.parametrize("name", ["fastv", "dart"])
def test_select(benchmark, inputs, name):
    """A press's ``select`` on evidence already computed (FastV: top-k; DART: pivots and greedy picks)."""
    press = get_press(name, layer=2, ratio=RATIO)
    clip = inputs.clip(press)
    evidence = inputs.evidence(press.needs)
    chosen = benchmark(press.select, clip, evidence)
    assert len(chosen) == clip.n_keep


@pytest.mark.parametrize("name", ["fastv", "random", "frame", "dart"])
def test_whole_selection(benchmark, inputs, name):
    """Evidence, ``select`` and the kept-slot layout: what a press adds to a prefill."""
    press = get_press(name, layer=2, ratio=RATIO)
    clip = inputs.clip(RATIO)
    slots = benchmark(select_slots, press, inputs, clip)
    assert slots.width == inputs.input_ids.shape[1] - clip.length + clip.n_keep


def test_slot_map_from_rows(benchmark, kept):
    rows = [row.nonzero().flatten() for row in kept]
    slots = benchmark(SlotMap.from_rows, rows, kept.shape[1])
    assert slots.width == int(kept.sum())


def test_restrict_mask(benchmark, kept):
    """The sdpa mask of a padded batch restricted to the kept rows and columns at the pruning layer."""
    seq = kept.shape[1]
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()[None, None]
    slots = SlotMap.from_rows([row.nonzero().flatten() for row in kept], kept.shape[1])
    restricted = benchmark(
        restrict_mask,
        mask,
        cols=slots,
        rows=slots,
        query_index=slots.index,
        attn_implementation="sdpa",
        dtype=torch.float32,
    )
    assert restricted.shape == (1, 1, slots.width, slots.width)
