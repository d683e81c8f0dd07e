"""FastV: keep the audio tokens the last prompt token attends to most at layer K-1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvprune.press import TokenDropPress, register_press


@register_press("fastv")
@dataclass(frozen=True)
class FastVPress(TokenDropPress):
    """Score = layer K-1's softmax attention from the last prompt token, averaged over heads; top-k
    per clip. Scores come from the recorded last query row, never from an eager attention matrix."""

    needs: ClassVar[frozenset[str]] = frozenset({"attention"})

    def select(self, clip, evidence) -> torch.Tensor:
        positions = clip.positions(evidence.attention.device)  # where layer K-1 ran (a split model: not the prompt's device)
        scores = evidence.attention[clip.row, positions]
        return positions[scores.topk(clip.n_keep).indices]
