"""Frame: keep audio tokens at a uniform temporal stride, with no scoring at all."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvprune.press import TokenDropPress, register_press
from kvprune.keep_rules import frame_offsets
from kvprune.engine.slots import to_device


@register_press("frame")
@dataclass(frozen=True)
class FramePress(TokenDropPress):
    """Keep the clip's token ``floor(i * n / k)`` (in order) for ``i < k`` of each clip of ``n``
    tokens keeping ``k`` (``keep_rule="floor"``: ``int(i * (n / k))``, AudioMarathon's offsets)."""

    def select(self, clip, evidence) -> torch.Tensor:
        if len(clip.spans) == 1 and self.keep_rule == "round":  # one run: no host work at all
            return torch.arange(clip.n_keep, device=evidence.device) * clip.length // clip.n_keep + clip.start
        return to_device(clip.take(frame_offsets(clip.length, clip.n_keep, self.keep_rule)), evidence.device)  # host: no stall
