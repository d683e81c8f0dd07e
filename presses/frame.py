"""Frame: keep audio tokens at a uniform temporal stride, with no scoring at all."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvprune.press import TokenDropPress, register_press


@register_press("frame")
@dataclass(frozen=True)
class FramePress(TokenDropPress):
    """Keep index ``floor(i * n / k)`` for ``i < k`` of each clip of ``n`` tokens keeping ``k``."""

    def select(self, clip, evidence) -> torch.Tensor:
        device = evidence.is_audio.device
        return torch.arange(clip.n_keep, device=device) * clip.length // clip.n_keep + clip.start
