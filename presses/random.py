"""Random: a uniform sample of each clip's audio tokens, reproducible from a seed."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvprune.slots import to_device
from kvprune.press import TokenDropPress, register_press


@register_press("random")
@dataclass(frozen=True)
class RandomPress(TokenDropPress):
    """Uniform without replacement. The draw depends only on ``seed`` and the clip (its number in
    the row and its length), so a row gives the same choice alone or in a batch."""

    seed: int = 0

    def select(self, clip, evidence) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + clip.index * 10_007 + clip.length)
        chosen = torch.randperm(clip.length, generator=generator)[: clip.n_keep] + clip.start  # on the host: same on any device
        return to_device(chosen, evidence.is_audio.device)
