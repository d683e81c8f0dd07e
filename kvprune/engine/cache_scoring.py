"""What a cache press scores with (``CacheEvidence``), and the scoring pieces presses share.

After decoder layer j has run its prefill, the engine hands every cache press compressing layer j one
``CacheEvidence``: the layer's cached keys and values, where each cached entry comes from (prompt
position, audio or not, which clip), which entries the press may evict (its *scope*) and, when the
press declared ``needs = {"queries"}``, the post-RoPE queries of the last prompt positions, as the
layer itself computed them (recorded by ``kvprune.engine.attention_probe``, under any attention backend).
Attention-based scores are computed from those few query rows against the cached keys: no score
needs ``output_attentions`` or an attention matrix over the whole prompt.

Shapes: B batch rows, L cached entries of this layer (slots: rows of a batch may hold different
counts, the shorter ones padded with *filler* slots on the left, which ``valid`` marks False; left
padding of the prompt is not valid either), ``heads`` attention heads, ``kv_heads`` key/value heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .attention_probe import ALL_QUERIES

__all__ = ["ALL_QUERIES", "CacheEvidence", "group_rank", "per_kv_head", "pool_entries", "window_attention"]

POOLS = ("avg", "max")


@dataclass
class CacheEvidence:
    """One layer's cache after its prefill, for cache presses to score."""

    layer: int  # decoder layer index
    keys: torch.Tensor  # (B, kv_heads, L, head_dim) post-RoPE keys
    values: torch.Tensor  # (B, kv_heads, L, head_dim)
    positions: torch.Tensor  # (B, L) long: prompt position of each entry, left padding not counted
    valid: torch.Tensor  # (B, L) bool: a prompt entry (False: left padding or filler)
    is_audio: torch.Tensor  # (B, L) bool: an audio placeholder's entry
    clip: torch.Tensor  # (B, L) long: the entry's clip number within its row (0, 1, ...), -1 if not in a clip of the scope
    #: (B, L) long: the budget group of each entry the press may evict (its clip under a clip scope:
    #: "audio", "video", "audio+video"; 0 under scope="prompt"); -1 for entries kept whatever their score
    groups: torch.Tensor
    #: (B, heads, w, head_dim) post-RoPE queries of the last w query rows of the layer's prefill
    #: (w = the press's ``query_rows``, at most the prompt), or None when the press needs none
    queries: torch.Tensor | None = None
    query_positions: torch.Tensor | None = None  # (B, w) prompt position of each query row
    query_valid: torch.Tensor | None = None  # (B, w) bool: False for left padding and filler rows
    #: (cos, sin), each (B or 1, rows, rotary_dim): the rotary embedding of every query row of the
    #: layer's prefill (the last w of them are the rows of ``queries``)
    rope: tuple[torch.Tensor, torch.Tensor] | None = None
    rope_frequencies: torch.Tensor | None = None  # (rotary_dim / 2,) the rotary embedding's inverse frequencies
    scaling: float | None = None  # the attention's softmax scaling (head_dim ** -0.5)
    sample_keys: tuple[int, ...] = ()  # per row, a hash of its input ids (padding left out)
    prompt_lengths: tuple[int, ...] = ()  # per row, its prompt's length (padding left out)

    @property
    def candidates(self) -> torch.Tensor:
        """(B, L) bool: the entries the press's scope lets it evict."""
        return self.groups >= 0

    def queries_for(self, rows: int) -> torch.Tensor:
        """The last ``rows`` recorded query rows (B, heads, rows, head_dim), or every row of a shorter
        prefill (``ALL_QUERIES``: every row); an error if they were not recorded."""
        recorded = 0 if self.queries is None else self.queries.shape[2]
        computed = self.rope[0].shape[-2] if self.rope is not None else recorded  # the rows the layer computed
        if self.queries is None or recorded < min(rows, computed):
            raise RuntimeError(
                f"this press reads the last {rows} query rows but the engine recorded {recorded}: declare "
                "needs = frozenset({'queries'}) and a large enough query_rows on the press."
            )
        return self.queries[:, :, -min(rows, recorded) :]


def window_attention(evidence: CacheEvidence, rows: int) -> torch.Tensor:
    """Softmax attention of the last ``rows`` query rows over the cached entries, (B, heads, rows, L)
    in float32: each query sees the valid entries at or before its own position, as in the prefill.
    Rows of left padding or filler are all zero. Costs ``rows x L`` per head, never ``L x L``."""
    queries = evidence.queries_for(rows)
    positions, valid = evidence.query_positions[:, -queries.shape[2] :], evidence.query_valid[:, -queries.shape[2] :]
    batch, heads, n_rows, dim = queries.shape
    kv_heads = evidence.keys.shape[1]
    grouped = queries.float().view(batch, kv_heads, heads // kv_heads, n_rows, dim)
    logits = torch.einsum("bkgqd,bksd->bkgqs", grouped, evidence.keys.float()) * evidence.scaling
    visible = (evidence.positions[:, None, :] <= positions[:, :, None]) & evidence.valid[:, None, :]  # (B, rows, L)
    visible = visible & valid[:, :, None]
    logits = logits.masked_fill(~visible[:, None, None], float("-inf"))
    weights = logits.softmax(dim=-1).nan_to_num(0.0)  # a row that sees nothing (padding) is all -inf
    return weights.reshape(batch, heads, n_rows, -1)


def per_kv_head(scores: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(B, heads, L) scores averaged over the query heads that share each KV head: (B, kv_heads, L)."""
    batch, heads, length = scores.shape
    return scores.view(batch, kv_heads, heads // kv_heads, length).mean(dim=2)


def pool_entries(scores: torch.Tensor, kernel: int, kind: str = "avg") -> torch.Tensor:
    """A 1-D pool of odd width ``kernel`` along the entries (last axis), same length: each entry takes
    the mean (``"avg"``, zero padding counted, as SnapKV and kvpress) or maximum of its neighbours."""
    if kind not in POOLS:
        raise ValueError(f"pool={kind!r} is invalid; choose one of {POOLS}.")
    if kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"kernel={kernel} is invalid: the pooling width must be odd and positive (e.g. 5).")
    shape = scores.shape
    flat = scores.reshape(-1, 1, shape[-1])
    pool = F.avg_pool1d if kind == "avg" else F.max_pool1d
    return pool(flat, kernel_size=kernel, stride=1, padding=kernel // 2).reshape(shape)


def group_rank(groups: torch.Tensor, order: torch.Tensor | None = None) -> torch.Tensor:
    """Each entry's rank within its group (0 for the first), counting in ``order`` (a permutation of
    the entries along the last axis, e.g. by descending score; default: cache order). Any leading
    shape; entries of group -1 are ranked among themselves."""
    length = groups.shape[-1]
    entries = torch.arange(length, device=groups.device)
    if order is None:
        order = entries.expand_as(groups)
    order = order.gather(-1, groups.gather(-1, order).argsort(dim=-1, stable=True))  # by group, in order within
    slot_group = groups.gather(-1, order) + 1
    sizes = torch.zeros(*groups.shape[:-1], length + 1, dtype=torch.long, device=groups.device)
    sizes.scatter_add_(-1, slot_group, torch.ones_like(slot_group))
    starts = sizes.cumsum(dim=-1) - sizes
    return torch.empty_like(groups).scatter_(-1, order, entries - starts.gather(-1, slot_group))
