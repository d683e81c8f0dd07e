"""Random: a uniform sample of each clip's audio tokens, reproducible from a seed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from kvprune.engine.slots import to_device
from kvprune.press import TokenDropPress, register_press


@register_press("random")
@dataclass(frozen=True)
class RandomPress(TokenDropPress):
    """Uniform without replacement. The draw depends on ``seed``, the sample (a hash of its row's
    token ids, padding left out) and the clip (its number in the row and its length): a row gives the
    same choice alone or in a batch, and two samples whose clips have the same length do not."""

    seed: int = 0

    def select(self, clip, evidence) -> torch.Tensor:
        sample = evidence.sample_keys[clip.row] if evidence.sample_keys else 0
        digest = hashlib.blake2b(f"{self.seed}:{sample}:{clip.index}:{clip.length}".encode(), digest_size=8).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(digest, "little"))
        chosen = clip.take(torch.randperm(clip.length, generator=generator)[: clip.n_keep])  # on the host: same on any device
        return to_device(chosen, evidence.device)
