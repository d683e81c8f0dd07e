"""Frame: keep audio tokens at a uniform temporal stride, with no scoring at all."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvprune.press import TokenDropPress, register_press
from kvprune.ratios import frame_offsets
from kvprune.slots import to_device


@register_press("frame")
@dataclass(frozen=True)
class FramePress(TokenDropPress):
    """Keep index ``floor(i * n / k)`` for ``i < k`` of each clip of ``n`` tokens keeping ``k``
    (``keep_rule="floor"``: ``int(i * (n / k))``, AudioMarathon's offsets)."""

    def select(self, clip, evidence) -> torch.Tensor:
        device = evidence.is_audio.device
        if self.keep_rule == "round":
            return torch.arange(clip.n_keep, device=device) * clip.length // clip.n_keep + clip.start
        offsets = torch.tensor(frame_offsets(clip.length, clip.n_keep, self.keep_rule)) + clip.start  # host: no stall
        return to_device(offsets, device)
