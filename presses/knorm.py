"""KNorm: evict the cached entries whose keys have the largest L2 norm.

Keys with a small norm tend to draw the most attention (Devoto et al., 2024, "A Simple and
Effective L2 Norm-Based Strategy for KV Cache Compression"), so the norm is a free importance score
that needs neither queries nor attention weights. As NVIDIA kvpress's KnormPress: the score of an
entry in a KV head is minus its key's norm (one choice per layer averages it over the heads).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvprune.press import CachePress, register_press


@register_press("knorm")
@dataclass(frozen=True)
class KNormPress(CachePress):
    def score(self, evidence) -> torch.Tensor:
        return -evidence.keys.float().norm(dim=-1)
