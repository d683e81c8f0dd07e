"""SnapKV: keep the entries the last prompt tokens (the question) attend to most, pooled.

As SnapKV (Li et al., 2024, "SnapKV: LLM Knows What You are Looking for Before Generation").

For each attention head: the softmax attention of each of the last ``window`` queries (the question
that follows the audio) over the cached entries, averaged over the window; then a 1-D pool of width
``kernel`` along the entries (``pool="avg"``, zero padding counted, as kvpress; or ``"max"``), so
that the neighbours of an important entry survive with it; then the mean over the heads that share
each KV head. As in SnapKV, the window's own entries are never evicted and do not take part in the
pooling (their attention counts as 0 there). Defaults are NVIDIA kvpress's SnapKVPress (window 64,
kernel 5, average pool).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvprune.engine.cache_scoring import per_kv_head, pool_entries, window_attention
from kvprune.press import CachePress, register_press


@register_press("snapkv")
@dataclass(frozen=True)
class SnapKVPress(CachePress):
    kernel: int = 5
    pool: str = "avg"

    needs: ClassVar[frozenset[str]] = frozenset({"queries"})

    def __post_init__(self) -> None:
        super().__post_init__()
        pool_entries(torch.zeros(1, 1), self.kernel, self.pool)  # checks kernel and pool

    def score(self, evidence) -> torch.Tensor:
        attention = window_attention(evidence, rows=self.window)  # (B, heads, w, L)
        rows = evidence.query_valid[:, -attention.shape[2] :]
        observed = attention.sum(dim=2) / rows.sum(dim=1).clamp(min=1)[:, None, None]
        first_row = evidence.query_positions[:, -attention.shape[2] :].masked_fill(~rows, torch.iinfo(torch.long).max)
        in_window = evidence.positions >= first_row.min(dim=1).values[:, None]
        pooled = pool_entries(observed.masked_fill(in_window[:, None], 0.0), self.kernel, self.pool)
        return per_kv_head(pooled, evidence.keys.shape[1]).masked_fill(in_window[:, None], float("inf"))
