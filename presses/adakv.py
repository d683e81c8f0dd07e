"""AdaKV: each KV head keeps its own entries (head-wise budgets), over any press that scores (default SnapKV).

As Ada-KV (Feng et al., 2024, "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget
Allocation"); ``AdaKVPress(press=KNormPress())``, ``adakv:press=knorm`` take the scores of another press.

Each KV head keeps its own entries: a budget group's ``kv_heads x k`` slots go to the best (head,
entry) pairs across the layer's heads, after every head gets its ``int(k * safeguard)`` best entries
(kvpress's ``alpha_safeguard``). Heads whose entries score higher keep more of them.

Memory: it saves memory, less than layer-wise choices at the same ratio. The layer's cache stays one
tensor (B, kv_heads, width, head_dim) whose width is the fullest head's count (read back from the
device once per compressed layer); heads keeping fewer entries get filler slots that a per-head
attention mask hides, in decoding and in later turns (sdpa and eager; not flash attention). kvpress's
AdaKVPress only masks: its cache keeps every entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvprune.engine.cache_budgets import top_per_group_headwise
from kvprune.press import DelegatingCachePress, register_press


@register_press("adakv")
@dataclass(frozen=True)
class AdaKVPress(DelegatingCachePress):
    safeguard: float = 0.2

    headwise: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.safeguard <= 1.0:
            raise ValueError(f"safeguard={self.safeguard} is invalid: the fraction of a head's budget it is guaranteed, in [0, 1].")

    def choose(self, scores, evidence, budgets):
        if scores.dim() == 2:  # one score per entry: every head ranks the entries alike
            scores = scores[:, None].expand(-1, evidence.keys.shape[1], -1)
        return top_per_group_headwise(scores, evidence.groups, budgets, self.safeguard)
