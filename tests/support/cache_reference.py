"""Reference cache presses for the tests, written from the papers' definitions with plain loops.

Attention-based scores come from an eager run with ``output_attentions=True`` (the full matrices the
presses themselves never build); keys, values and the attention inputs from an unpressed run. What a
press kept is read from the pressed cache itself: every cached key is matched to the unpressed
cache's key of the same prompt position, layer and KV head.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from kvprune.keep_rules import keep_count
from tests.support.helpers import audio_clips, cache_of, decoder_layers, language_model, model
from tests.support.tiny_models import AUDIO, FAMILIES


@dataclass
class Prefill:
    """An unpressed prefill of a batch: per layer, keys/values (B, kv_heads, S, d), eager attention
    weights (B, heads, S, S) and the attention module's input (B, S, D)."""

    inputs: dict
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    attentions: list[torch.Tensor]
    attention_inputs: list[torch.Tensor]
    rope_positions: torch.Tensor  # (B, S) the positions the rotary embedding was given (text rows for mrope)

    @property
    def valid(self) -> torch.Tensor:
        return self.inputs["attention_mask"].bool()

    def clips(self, b: int) -> list[list[int]]:
        return audio_clips(self.inputs["input_ids"][b])

    def offset(self, b: int, p: int) -> int:
        return p - int((~self.valid[b]).sum())


def _freeze(rows) -> tuple:
    return tuple(tuple(row) for row in rows)


@lru_cache(maxsize=None)
def prefill(family: str, attn: str, rows: tuple, seed: int = 0) -> Prefill:
    inputs = FAMILIES[family].inputs([list(r) for r in rows], seed=seed)
    m, eager = model(family, attn), model(family, "eager")
    captured: dict[int, torch.Tensor] = {}
    hooks = [
        layer.self_attn.register_forward_pre_hook(
            lambda module, args, kwargs, j=j: captured.__setitem__(j, args[0] if args else kwargs["hidden_states"]),
            with_kwargs=True,
        )
        for j, layer in enumerate(decoder_layers(m))
    ]
    rope_ids = {}
    rotary = language_model(m).rotary_emb
    def record_rope(module, args, kwargs):
        rope_ids.setdefault("ids", args[1] if len(args) > 1 else kwargs["position_ids"])

    hooks.append(rotary.register_forward_pre_hook(record_rope, with_kwargs=True))
    try:
        with torch.no_grad():
            cache = cache_of(m(**inputs, use_cache=True))
    finally:
        for hook in hooks:
            hook.remove()
    with torch.no_grad():
        attentions = eager(**inputs, output_attentions=True).attentions
    ids = rope_ids["ids"]
    ids = ids[0] if ids.dim() == 3 else ids  # mrope: (3, B, S), the text rows are equal
    return Prefill(
        inputs=inputs,
        keys=[layer.keys for layer in cache.layers],
        values=[layer.values for layer in cache.layers],
        attentions=list(attentions),
        attention_inputs=[captured[j] for j in range(len(captured))],
        rope_positions=ids.expand(inputs["input_ids"].shape[0], -1),
    )


# -- what the pressed cache holds -----------------------------------------------------------------
def cached_positions(pressed_keys: torch.Tensor, full_keys: torch.Tensor, valid: torch.Tensor) -> list[list[set[int]]]:
    """Per row and KV head, the valid prompt positions whose keys the pressed cache holds."""
    out = []
    for b in range(full_keys.shape[0]):
        heads = []
        for h in range(full_keys.shape[1]):
            full = full_keys[b, h][valid[b]]
            positions = valid[b].nonzero().flatten()
            assert len({tuple(k.tolist()) for k in full}) == len(full), "keys of distinct positions must differ"
            match = (pressed_keys[b, h][:, None, :] == full[None]).all(dim=-1)  # (slots, valid positions)
            heads.append({int(positions[i]) for i in match.any(dim=0).nonzero().flatten()})
        out.append(heads)
    return out


# -- reference scores, per row b and layer j, over the prompt positions ---------------------------
def knorm_scores(p: Prefill, b: int, j: int) -> torch.Tensor:
    """(kv_heads, S): minus each key's L2 norm."""
    return -p.keys[j][b].double().norm(dim=-1)


def tova_scores(p: Prefill, b: int, j: int) -> torch.Tensor:
    """(1, S): the last prompt token's attention, mean over heads."""
    return p.attentions[j][b, :, -1, :].double().mean(dim=0, keepdim=True)


def snapkv_scores(attention: torch.Tensor, kv_heads: int, window: int, kernel: int = 5, pool: str = "avg") -> torch.Tensor:
    """(kv_heads, S) from one row's attention weights (heads, S, S): the last ``window`` queries'
    attention averaged over them, the window's own columns zeroed, pooled over ``kernel`` neighbours
    (zeros beyond the ends), mean over each KV head's queries; the window's entries score +inf."""
    attention = attention.double()
    heads, length, _ = attention.shape
    first = length - window
    observed = attention[:, first:, :].mean(dim=1)
    observed[:, first:] = 0.0
    pooled = torch.zeros_like(observed)
    for i in range(length):
        around = [observed[:, q] if 0 <= q < length else torch.zeros(heads, dtype=torch.float64)
                  for q in range(i - kernel // 2, i + kernel // 2 + 1)]
        stacked = torch.stack(around, dim=1)
        pooled[:, i] = stacked.mean(dim=1) if pool == "avg" else stacked.max(dim=1).values
    scores = pooled.view(kv_heads, heads // kv_heads, length).mean(dim=1)
    scores[:, first:] = math.inf
    return scores


def expected_attention_scores(family: str, p: Prefill, b: int, j: int, n_future: int = 512, n_sink: int = 4) -> torch.Tensor:
    """(kv_heads, S): softmax over the valid keys of k.mu' s + k^T Sigma' k s^2 / 2, mu' and Sigma' the
    pre-RoPE query statistics rotated by the RoPE matrix averaged over the next positions, times |v|."""
    m = model(family, "sdpa")
    attention = decoder_layers(m)[j].self_attn
    hidden = p.attention_inputs[j][b : b + 1].double()
    heads, dim = m.config.get_text_config().num_attention_heads, attention.head_dim
    with torch.no_grad():
        if hasattr(attention, "q_proj"):
            queries = torch.nn.functional.linear(hidden, attention.q_proj.weight.double(),
                                                 None if attention.q_proj.bias is None else attention.q_proj.bias.double())
        else:  # Phi-4: one projection for queries, keys and values
            queries = torch.nn.functional.linear(hidden, attention.qkv_proj.weight.double())[..., : heads * dim]
    queries = queries.view(-1, heads, dim)  # (S, heads, d)
    if hasattr(attention, "q_norm"):  # Qwen3-Omni, Gemma-3n: each head's query is RMS-normed before RoPE
        with torch.no_grad():
            queries = attention.q_norm(queries).double()
    rows = [i for i in range(queries.shape[0]) if p.valid[b, i] and p.offset(b, i) >= n_sink]
    q = queries[rows]
    mean = q.mean(dim=0)  # (heads, d)
    centred = q - mean
    cov = torch.einsum("shi,shj->hij", centred, centred) / len(rows)
    rotary = language_model(m).rotary_emb
    last = int(p.rope_positions[b, -1])
    future = torch.arange(last + 1, last + 1 + n_future)[None]
    # Gemma-3n's rotary embedding turns at one base per attention type, named in each call
    per_type = "layer_type" in inspect.signature(rotary.forward).parameters
    with torch.no_grad():
        cos, sin = rotary(hidden.float(), future, *([attention.config.layer_types[j]] if per_type else []))
    matrices = [_rope_matrix(c.double(), s.double(), dim) for c, s in zip(cos[0], sin[0])]
    rotation = torch.stack(matrices).mean(dim=0)
    mean = mean @ rotation.T
    cov = rotation @ cov @ rotation.T
    keys, values = p.keys[j][b].double(), p.values[j][b].double()  # (kv_heads, S, d)
    kv_heads = keys.shape[0]
    scale = attention.scaling
    scores = []
    for h in range(heads):
        k = keys[h // (heads // kv_heads)]
        logits = k @ mean[h] * scale + torch.einsum("si,ij,sj->s", k, cov[h], k) * scale**2 / 2
        logits[~p.valid[b]] = -math.inf
        scores.append(logits.softmax(dim=0))
    scores = torch.stack(scores).view(kv_heads, heads // kv_heads, -1).mean(dim=1)
    return scores * values.norm(dim=-1)


def _rope_matrix(cos: torch.Tensor, sin: torch.Tensor, dim: int) -> torch.Tensor:
    """The matrix of x -> x cos + rotate_half(x) sin on the first len(cos) features."""
    rotary, half = len(cos), len(cos) // 2
    matrix = torch.eye(dim, dtype=torch.float64)
    block = torch.diag(cos)
    swap = torch.zeros(rotary, rotary, dtype=torch.float64)
    swap[half:, :half], swap[:half, half:] = torch.eye(half), -torch.eye(half)
    matrix[:rotary, :rotary] = block + torch.diag(sin) @ swap
    return matrix


# -- reference selections --------------------------------------------------------------------------
def best(scores: dict[int, float], k: int) -> set[int]:
    """The k highest-scoring positions, ties to the earlier position."""
    return set(sorted(scores, key=lambda q: (-scores[q], q))[:k])


def layerwise_keep(scores: torch.Tensor, candidate_groups: list[list[int]], budgets: list[int], keep_always: set[int]) -> set[int]:
    """Scores averaged over KV heads; each group keeps its budget; ``keep_always`` stays."""
    mean = scores.mean(dim=0)
    kept = set(keep_always)
    for group, budget in zip(candidate_groups, budgets):
        kept |= best({q: float(mean[q]) for q in group}, budget)
    return kept


def headwise_keep(scores: torch.Tensor, candidate_groups, budgets, keep_always, safeguard: float) -> list[set[int]]:
    """Per KV head: each head's int(k * safeguard) best of a group, then the group's best (head,
    position) pairs across heads up to heads * k (ties: lower head, then earlier position)."""
    kv_heads = scores.shape[0]
    kept = [set(keep_always) for _ in range(kv_heads)]
    for group, budget in zip(candidate_groups, budgets):
        forced = [best({q: float(scores[h, q]) for q in group}, int(budget * safeguard)) for h in range(kv_heads)]
        pairs = [(h, q) for h in range(kv_heads) for q in group if q not in forced[h]]
        pairs.sort(key=lambda pair: (-float(scores[pair]), pair[0], pair[1]))
        chosen = pairs[: kv_heads * budget - sum(len(f) for f in forced)]
        for h in range(kv_heads):
            kept[h] |= forced[h] | {q for hh, q in chosen if hh == h}
    return kept


def uniform_budgets(clips: list[list[int]], ratio: float) -> list[int]:
    return [keep_count(len(clip), ratio) for clip in clips]


def audio_scope(p: Prefill, b: int) -> tuple[list[list[int]], set[int]]:
    """Candidate groups (the clips) and the valid positions never evicted (everything else)."""
    clips = p.clips(b)
    audio = {q for clip in clips for q in clip}
    return clips, {q for q in range(p.valid.shape[1]) if p.valid[b, q] and q not in audio}


def prompt_scope(p: Prefill, b: int, window: int) -> tuple[list[list[int]], set[int]]:
    """One group: every valid position from the first clip on, except the last ``window``."""
    valid = [q for q in range(p.valid.shape[1]) if p.valid[b, q]]
    first_clip = p.clips(b)[0][0]
    group = [q for q in valid[:-window] if q >= first_clip]
    return [group], set(valid) - set(group)


def tokens_of(input_ids: torch.Tensor) -> set[int]:
    return set((input_ids != AUDIO).nonzero().flatten().tolist())


freeze = _freeze


def recompute_with_eviction(m, attn, inputs, seq, kept, prompt_len):
    """Logits of ``seq`` without a cache, where every position after the prompt sees, at layer j and
    head h, only the prompt positions ``kept[j][h]`` (and every later position): the eviction as masks."""
    length, heads = seq.shape[1], m.config.get_text_config().num_attention_heads

    def mask_for(j):
        allowed = torch.ones(length, length).tril().bool()[None].repeat(heads, 1, 1)
        if j in kept:
            for h in range(heads):
                evicted = [q for q in range(prompt_len) if q not in kept[j][h * len(kept[j]) // heads]]
                allowed[h, prompt_len:, evicted] = False
        allowed = allowed[None]
        return allowed if attn == "sdpa" else torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)

    hooks = [layer.register_forward_pre_hook(lambda module, args, kwargs, j=j: (args, {**kwargs, "attention_mask": mask_for(j)}),
                                             with_kwargs=True)
             for j, layer in enumerate(decoder_layers(m))]
    try:
        with torch.no_grad():
            return m(**dict(inputs, input_ids=seq, attention_mask=torch.ones_like(seq)), use_cache=False).logits[:, -1]
    finally:
        for hook in hooks:
            hook.remove()
