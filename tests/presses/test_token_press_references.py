"""FastV and DART pick exactly what independent references computed in the test pick."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kvprune import DARTPress, FastVPress
from kvprune.keep_rules import keep_count
from tests.support.helpers import ATTENTION, K, audio_clips, decoder_layers, final_norm, model
from tests.support.tiny_models import AUDIO, FAMILIES

ROWS = [
    [("text", 3), ("audio", 16), ("text", 4), ("audio", 8), ("text", 5)],
    [("text", 6), ("audio", 12), ("text", 2)],
]


def _main_stream(output) -> torch.Tensor:
    """A decoder layer's hidden states: its output, the first item of a tuple, or of a stack of residual
    streams (n, B, S, D) the first, main one (Gemma-3n's AltUp)."""
    output = output[0] if isinstance(output, tuple) else output
    return output[0] if output.dim() == 4 else output


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("ratio", [0.3, 0.7])
def test_fastv_keeps_top_k_of_eager_attention(family, attn, ratio):
    rows = ROWS
    inputs = FAMILIES[family].inputs(rows)
    with torch.no_grad():
        attentions = model(family, "eager")(**inputs, output_attentions=True).attentions
    # layer K-1, last prompt token, mean over heads: the matrix the press must never build
    scores = attentions[K - 1][:, :, -1, :].mean(dim=1)
    with torch.no_grad(), FastVPress(layer=K)(model(family, attn), ratio=ratio) as outcome:
        model(family, attn)(**inputs)
    for b in range(len(rows)):
        pad = int((inputs["attention_mask"][b] == 0).sum())
        expected = []
        for clip in audio_clips(inputs["input_ids"][b]):
            clip_scores = scores[b, clip]
            top = clip_scores.topk(keep_count(len(clip), ratio)).indices
            expected += [clip[i] - pad for i in top.tolist()]
        assert outcome.kept_positions[b].tolist() == sorted(expected)


def reference_dart(keys, hidden, clip, text_after, n_keep, budget, ratio, pivot_audio=4, pivot_text=4):
    """DART as described in the press docstring, written with Python lists and loops."""
    key_l1 = [float(keys[i].abs().sum()) for i in range(len(keys))]
    n_audio_pivots = min(pivot_audio, n_keep if budget == "equal" else len(clip))
    audio_pivots = sorted(clip, key=lambda i: -key_l1[i])[:n_audio_pivots]
    text_pivots = sorted(text_after, key=lambda i: -key_l1[i])[: min(pivot_text, len(text_after))]
    pivots = sorted(audio_pivots + text_pivots)
    if budget == "equal":
        claims = n_keep - n_audio_pivots
        shares = [claims // len(pivots) + (1 if i < claims % len(pivots) else 0) for i in range(len(pivots))]
    else:
        shares = [int(len(clip) * (1 - ratio) / len(pivots))] * len(pivots)
    kept = list(audio_pivots)
    pool = [i for i in clip if i not in audio_pivots]
    for pivot, share in zip(pivots, shares):
        similarity = {i: float(F.cosine_similarity(hidden[pivot], hidden[i], dim=0)) for i in pool}
        chosen = sorted(pool, key=lambda i: similarity[i])[:share]
        kept += chosen
        pool = [i for i in pool if i not in chosen]
    return kept


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("budget,ratio", [("equal", 0.5), ("equal", 0.8), ("reference", 0.5)])
def test_dart_matches_plain_reference(family, attn, budget, ratio):
    rows = ROWS
    m = model(family, attn)
    inputs = FAMILIES[family].inputs(rows)
    captured = {}
    hook = decoder_layers(m)[K - 1].register_forward_hook(
        lambda module, args, output: captured.update(hidden=_main_stream(output))  # returns None: output kept
    )
    try:
        with torch.no_grad():
            out = m(**inputs, use_cache=True)
    finally:
        hook.remove()
    cache = getattr(out, "cache", None) or out.past_key_values
    keys = cache.layers[K - 1].keys  # post-RoPE keys of layer K-1: (B, kv_heads, S, head_dim)
    with torch.no_grad():
        hidden = final_norm(m)(captured["hidden"]).float()

    with torch.no_grad(), DARTPress(layer=K, budget=budget)(m, ratio=ratio) as outcome:
        m(**inputs)
    for b in range(len(rows)):
        ids, valid = inputs["input_ids"][b], inputs["attention_mask"][b].bool()
        pad = int((~valid).sum())
        flat_keys = keys[b].transpose(0, 1).flatten(1).float()
        expected = []
        for clip in audio_clips(ids):
            text_after = [i for i in range(clip[-1] + 1, len(ids)) if valid[i] and ids[i] != AUDIO]
            kept = reference_dart(flat_keys, hidden[b], clip, text_after, keep_count(len(clip), ratio), budget, ratio)
            expected += [i - pad for i in kept]
        assert outcome.kept_positions[b].tolist() == sorted(expected)
        if budget == "equal":
            assert outcome.stats[b].kept_tokens == sum(keep_count(len(c), ratio) for c in audio_clips(ids))
