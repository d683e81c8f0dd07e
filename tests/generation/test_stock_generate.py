"""Stock ``generate``, timed: one call split at the end of its prefill."""

from __future__ import annotations

import torch

from kvprune import FramePress
from kvprune.generation import stock_generate
from kvprune.generation.timing import kv_cache_bytes
from tests.support.helpers import GREEDY, K, cache_of, model
from tests.support.tiny_models import FAMILIES, N_LAYERS

ROW = [[("text", 4), ("audio", 16), ("text", 5)]]


def test_stock_generate_splits_one_call_and_measures_the_prefill_cache():
    m = model("qwen2_audio", "sdpa")
    inputs = FAMILIES["qwen2_audio"].inputs(ROW)
    calls = []
    handle = m.register_forward_hook(lambda *a: calls.append(1))
    try:
        new_ids, timing = stock_generate(m, inputs, max_new_tokens=5, **GREEDY)
    finally:
        handle.remove()
    assert len(calls) == 5, "one prefill and four decoding steps, nothing run twice"
    assert new_ids.shape == (1, 5) and timing.new_tokens == 5
    assert timing.prefill_s > 0 and timing.decode_s > 0
    assert timing.decode_tokens_per_s == 4 / timing.decode_s
    assert timing.peak_memory_bytes is None  # the caller's to measure
    assert timing.cache == "dynamic" and not timing.compiled
    # the cache right after prefill: every layer holds the whole prompt
    with torch.no_grad():
        prefill_cache = cache_of(m(**inputs, use_cache=True))
    assert timing.kv_cache_bytes == kv_cache_bytes(prefill_cache)
    layer = prefill_cache.layers[0]
    assert timing.kv_cache_bytes == N_LAYERS * 2 * layer.keys.numel() * layer.keys.element_size()


def test_pruned_prefill_cache_is_smaller_by_the_dropped_tokens():
    m = model("qwen2_audio", "sdpa")
    inputs = FAMILIES["qwen2_audio"].inputs(ROW)
    _, full = stock_generate(m, inputs, max_new_tokens=2, **GREEDY)
    with FramePress(layer=K)(m, ratio=0.5):
        _, pruned = stock_generate(m, inputs, max_new_tokens=2, **GREEDY)
    width = inputs["input_ids"].shape[1]
    per_token_layer = full.kv_cache_bytes // (N_LAYERS * width)
    assert full.kv_cache_bytes - pruned.kv_cache_bytes == per_token_layer * (N_LAYERS - K) * 8
