"""StreamingLLM: keep each clip's first entries (attention sinks) and its most recent ones.

As StreamingLLM (Xiao et al., 2024, "Efficient Streaming Language Models with Attention Sinks") and
NVIDIA kvpress's StreamingLLMPress, applied to each budget group: under ``scope="audio"`` every clip keeps its
first ``sinks`` entries and its last ones, up to its budget (a budget of at most ``sinks`` keeps
the first entries only). No scoring at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvprune.engine.cache_scoring import group_rank
from kvprune.press import CachePress, register_press

SINK = float(2**24)  # above any position, exactly representable in float32 with the ranks below it


@register_press("streaming_llm")
@dataclass(frozen=True)
class StreamingLLMPress(CachePress):
    sinks: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sinks < 0:
            raise ValueError(f"sinks={self.sinks} is invalid: give the number of first entries kept (>= 0).")

    def score(self, evidence) -> torch.Tensor:
        rank = group_rank(evidence.groups)
        return torch.where(rank < self.sinks, SINK - rank.float(), evidence.positions.float())
