"""TOVA: evict the entries the last prompt token attends to least, at every compressed layer.

As TOVA (Oren et al., 2024, "Transformers are Multi-State RNNs"), applied once after the prefill.

Score = the softmax attention of the layer's last query over the cached entries, averaged over all
attention heads, as TOVA and NVIDIA kvpress's TOVAPress. The query is recorded during the layer's own
attention, so no attention matrix is ever built and any attention backend works.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvprune.engine.cache_scoring import window_attention
from kvprune.press import CachePress, register_press


@register_press("tova")
@dataclass(frozen=True)
class TOVAPress(CachePress):
    needs: ClassVar[frozenset[str]] = frozenset({"queries"})

    @property
    def query_rows(self) -> int:
        return 1

    def score(self, evidence) -> torch.Tensor:
        return window_attention(evidence, rows=1).mean(dim=(1, 2))
