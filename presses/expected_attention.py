"""Expected attention: keep the entries that future queries are expected to attend to most.

As NVIDIA kvpress's ExpectedAttentionPress (Devoto et al., 2025, "Expected Attention: KV Cache
Compression by Estimating Attention from Future Queries Distribution").

Per attention head, from the layer's own prompt queries (recorded post-RoPE, then un-rotated with the
layer's rotary embedding; the first ``n_sink`` prompt positions left out as outliers):

1. ``mu`` and ``Sigma``: the mean and covariance of the queries before RoPE.
2. ``R``: the RoPE rotation averaged over the next ``n_future`` positions after the prompt (the
   angles continue from the last prompt position with the rotary embedding's frequencies).
3. Future queries ~ N(R mu, R Sigma R^T), so the expected unnormalised attention of key ``k`` is
   ``E[exp(s q.k)] = exp(s k.R mu + s^2/2 k^T R Sigma R^T k)`` with ``s`` the attention scaling
   (``use_covariance=False`` drops the second term).
4. Softmax of that over the layer's cached entries, averaged over the heads of each KV head, and,
   with ``use_vnorm``, multiplied by ``epsilon`` plus the norm of the entry's value.

Unlike kvpress, the first ``n_sink`` entries stay in the softmax: whether they may be evicted is the
scope's business (under ``scope="audio"`` they are text, never evicted). Recording every query of a
layer holds one tensor of the hidden states' size until the layer's cache is compressed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvprune.engine.cache_scoring import ALL_QUERIES
from kvprune.press import CachePress, register_press


@register_press("expected_attention")
@dataclass(frozen=True)
class ExpectedAttentionPress(CachePress):
    n_future: int = 512
    n_sink: int = 4
    use_covariance: bool = True
    use_vnorm: bool = True
    epsilon: float = 0.0

    needs: ClassVar[frozenset[str]] = frozenset({"queries"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_future < 1 or self.n_sink < 0:
            raise ValueError("n_future must be >= 1 and n_sink >= 0.")

    @property
    def query_rows(self) -> int:
        return ALL_QUERIES

    def score(self, evidence) -> torch.Tensor:
        if evidence.rope is None or evidence.rope_frequencies is None:
            raise RuntimeError("expected_attention needs the layer's rotary embedding, which this model does not expose.")
        mean, cov = self.query_statistics(evidence)
        batch, kv_heads, length, dim = evidence.keys.shape
        keys = evidence.keys.float()
        mean = mean.reshape(batch, kv_heads, -1, dim)
        logits = torch.einsum("bkgd,bkld->bkgl", mean, keys) * evidence.scaling
        if cov is not None:
            spread = torch.einsum("bkld,bkgde,bkle->bkgl", keys, cov.reshape(batch, kv_heads, -1, dim, dim), keys)
            logits = logits + spread * evidence.scaling**2 / 2
        logits = logits.masked_fill(~evidence.valid[:, None, None], float("-inf"))
        scores = logits.softmax(dim=-1).mean(dim=2)
        if self.use_vnorm:
            scores = (scores + self.epsilon) * evidence.values.float().norm(dim=-1)
        return scores

    def query_statistics(self, evidence) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Mean (B, heads, d) and covariance (B, heads, d, d) of the future queries, after RoPE."""
        queries = evidence.queries_for(ALL_QUERIES).float()
        cos, sin = (t.float()[:, -queries.shape[2] :] for t in evidence.rope)
        norm = torch.hypot(cos, sin)  # the rotary embedding's attention scaling, carried by the queries
        cos, sin = cos / norm, sin / norm
        unrotated = rotate(queries, cos[:, None], -sin[:, None])
        rows = evidence.query_valid & (evidence.query_positions >= self.n_sink)
        weight = rows.float()[:, None, :, None]
        count = rows.sum(dim=1).clamp(min=1).float()[:, None, None]
        mean = (unrotated * weight).sum(dim=2) / count
        cov = None
        if self.use_covariance:
            centred = (unrotated - mean[:, :, None]) * weight
            cov = centred.transpose(-1, -2) @ centred / count[..., None]
        future_cos, future_sin = self.future_rotation(cos[:, -1], sin[:, -1], evidence.rope_frequencies)
        future_cos, future_sin = future_cos[:, None], future_sin[:, None]  # one rotation for all heads
        mean = rotate(mean, future_cos, future_sin)
        if cov is not None:
            dim = queries.shape[-1]
            identity = torch.eye(dim, device=queries.device)
            rotation = rotate(identity, future_cos[..., None, :], future_sin[..., None, :]).transpose(-1, -2)
            cov = rotation @ cov @ rotation.transpose(-1, -2)
        return mean, cov

    def future_rotation(self, cos: torch.Tensor, sin: torch.Tensor, frequencies: torch.Tensor):
        """cos and sin of the RoPE angles averaged over the ``n_future`` positions after the last
        prompt position, whose unit cos and sin (B, rotary_dim) are given."""
        step = torch.cat([frequencies, frequencies]).float().to(cos.device)
        if step.shape[0] != cos.shape[-1]:
            raise RuntimeError(f"rotary embedding of {cos.shape[-1]} dims but {frequencies.shape[0]} frequencies.")
        ahead = torch.arange(1, self.n_future + 1, device=cos.device, dtype=torch.float32)
        angles = torch.atan2(sin, cos)[:, None, :] + ahead[:, None] * step  # (B, n_future, rotary_dim)
        return angles.cos().mean(dim=1), angles.sin().mean(dim=1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding as HF applies it: the first ``rotary_dim`` features of ``x`` (the size of
    ``cos``) become ``x * cos + rotate_half(x) * sin``; the rest pass unchanged."""
    rotary = cos.shape[-1]
    head, tail = x[..., :rotary], x[..., rotary:]
    half = rotary // 2
    turned = torch.cat([-head[..., half:], head[..., :half]], dim=-1)
    rotated = head * cos + turned * sin
    return torch.cat([rotated, tail.expand(*rotated.shape[:-1], tail.shape[-1])], dim=-1)
