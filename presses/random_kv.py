"""Random (cache): evict a uniform sample of the candidates, seeded per sample.

As NVIDIA kvpress's RandomPress. The draw is reproducible and differs from sample to sample: it
is seeded by ``seed``, a hash of the row's input ids (padding left out) and the layer, and indexed
by prompt position, so a row gives the same choice alone or in a padded batch, and two prompts of
the same length do not.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from kvprune.press import CachePress, register_press
from kvprune.engine.slots import to_device


@register_press("random_kv")
@dataclass(frozen=True)
class RandomKVPress(CachePress):
    seed: int = 0

    def score(self, evidence) -> torch.Tensor:
        rows = [self.draw(key, evidence.layer, n) for key, n in zip(evidence.sample_keys, evidence.prompt_lengths)]
        table = torch.zeros(len(rows), max(evidence.prompt_lengths))
        for b, row in enumerate(rows):
            table[b, : len(row)] = row
        return to_device(table, evidence.positions.device).gather(1, evidence.positions)

    def draw(self, sample_key: int, layer: int, length: int) -> torch.Tensor:
        """Uniform scores of a ``length``-token prompt's positions at one layer, on the host."""
        digest = hashlib.blake2b(f"{self.seed}:{sample_key}:{layer}".encode(), digest_size=8).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(digest, "little"))
        return torch.rand(length, generator=generator)
