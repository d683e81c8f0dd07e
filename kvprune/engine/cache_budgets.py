"""How many cached entries each layer (and head) keeps, and which: the budget policies and selections
that any cache press combines with its scores.

Entries are chosen per *group*: under ``scope="audio"`` each clip is a group and keeps its share
(``keep_count(n, ratio)`` of its ``n`` entries, as token-dropping presses do), so a short clip is
never starved by a long one; under ``scope="prompt"`` all candidates of a row form one group.

* Uniform budgets: every compressed layer keeps ``keep_count(n, ratio)`` of a group's ``n`` entries.
* Pyramid budgets (PyramidKV, Cai et al. 2024): the budget falls linearly with depth, from
  ``2k - k/beta`` at the first compressed layer to ``k/beta`` at the last, so that the layers
  together keep what uniform budgets keep (``k`` each), exactly, by cumulative rounding.
* Layer-wise selection: one set of entries per layer for all heads (``top_per_group``).
* Head-wise selection (AdaKV, Feng et al. 2024): each KV head keeps its own entries; a group's
  ``heads x k`` slots go to the best (head, entry) pairs of the layer, after each head is guaranteed
  its ``int(k * safeguard)`` best entries (``top_per_group_headwise``).

Ties go to the earlier entry. Nothing here reads values back from the device.
"""

from __future__ import annotations

import math

import torch

from .cache_scoring import group_rank


def pyramid_keep(n: int, k: int, depth: int, n_depths: int, beta: float) -> int:
    """Entries a group of ``n`` candidates keeps at compressed layer ``depth`` (0-based) of
    ``n_depths``, where a uniform budget keeps ``k`` at every layer.

    Per layer the real-valued budget is linear in depth, from ``high`` to ``low`` with
    ``low = max(k / beta, 1)`` and ``high = 2k - low``; when ``high`` exceeds ``n`` it is capped at
    ``n`` and ``low = 2k - n`` (PyramidKV's own rule), so the mean stays ``k``. Layer ``depth``
    keeps ``round(S(depth + 1)) - round(S(depth))`` where ``S(t)`` is the sum of the first ``t``
    real budgets: the budgets of all layers add up to exactly ``n_depths * k``, and each lies in
    ``[1, n]``.
    """
    if n_depths == 1 or k >= n:
        return k
    low = max(k / beta, 1.0)
    high = 2 * k - low
    if high > n:
        high, low = float(n), float(2 * k - n)
    step = (high - low) / (n_depths - 1)

    def total(t: int) -> float:  # the real budgets of the first t layers
        return t * high - step * t * (t - 1) / 2

    return _round(total(depth + 1)) - _round(total(depth))


def _round(value: float) -> int:
    """Half up: the same on every platform, and differences of rounded sums stay in range."""
    return math.floor(value + 0.5)


def top_per_group(scores: torch.Tensor, groups: torch.Tensor, budgets: torch.Tensor) -> torch.Tensor:
    """Keep mask over the last axis: the ``budgets[..., g]`` highest-scoring entries of each group g;
    entries of group -1 are always kept. ``scores`` and ``groups`` share any shape ``(..., L)``;
    ``budgets`` is ``(..., G)`` with every group id below G."""
    order = scores.argsort(dim=-1, descending=True, stable=True)
    rank = group_rank(groups, order)
    budget = budgets.gather(-1, groups.clamp(min=0))
    return (groups < 0) | (rank < budget)


def top_per_group_headwise(
    scores: torch.Tensor, groups: torch.Tensor, budgets: torch.Tensor, safeguard: float
) -> torch.Tensor:
    """Head-wise keep mask (B, kv_heads, L) from per-head scores (B, kv_heads, L): in each row,
    group g keeps ``kv_heads * budgets[b, g]`` (head, entry) pairs, the best across heads, after
    every head's ``int(budgets[b, g] * safeguard)`` best entries of the group. ``groups`` (B, L)
    and ``budgets`` (B, G) are shared by the heads; entries of group -1 are kept in every head."""
    batch, kv_heads, length = scores.shape
    head_groups = groups[:, None].expand(batch, kv_heads, length)
    guaranteed = (budgets.float() * safeguard).floor().long()
    forced = top_per_group(scores, head_groups, guaranteed[:, None].expand(-1, kv_heads, -1)) & (head_groups >= 0)
    boosted = scores.float().masked_fill(forced, float("inf"))
    keep = top_per_group(boosted.reshape(batch, -1), head_groups.reshape(batch, -1), budgets * kv_heads)
    return keep.view(batch, kv_heads, length)
