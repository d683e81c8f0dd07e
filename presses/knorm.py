"""KNorm: evict the cached audio entries whose keys have the largest L2 norm.

Keys with a small norm tend to draw the most attention (Devoto et al., 2024, "A Simple and
Effective L2 Norm-Based Strategy for KV Cache Compression"), so the norm is a free importance score
that needs neither queries nor attention weights. As in NVIDIA kvpress's KnormPress, but restricted
to audio entries and with one choice per layer shared by all heads (norms averaged over heads).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvprune.press import CachePress, register_press


@register_press("knorm")
@dataclass(frozen=True)
class KNormPress(CachePress):
    def score(self, layer_idx, keys, values, is_audio) -> torch.Tensor:
        return -keys.float().norm(dim=-1).mean(dim=1)
