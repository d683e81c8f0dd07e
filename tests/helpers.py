"""Shared test utilities: generation settings, cache access across transformers versions, and a
press that keeps a fixed set of positions (to recompute a pruned run without a cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch

from kvprune.press import TokenDropPress
from tiny_models import AUDIO, AUDIO_END, AUDIO_START, FAMILIES, PAD

# Never let a random model emit placeholder ids: some families re-merge audio when they see one.
GREEDY = dict(do_sample=False, pad_token_id=PAD, suppress_tokens=[AUDIO, AUDIO_START, AUDIO_END, 103, 104, 105])
ATTENTION = ["sdpa", "eager"]
K = 2


@lru_cache(maxsize=None)
def model(family: str, attn: str):
    return FAMILIES[family].build(attn)


def cache_of(output):
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def cache_lengths(cache) -> list[int]:
    return [layer.keys.shape[2] for layer in cache.layers]


def rows_for(family: str, rows):
    """Round clip lengths to what the family's encoder can produce."""
    multiple = FAMILIES[family].clip_multiple
    return [[(kind, n if kind == "text" else max(multiple, n // multiple * multiple)) for kind, n in row] for row in rows]


def clip_positions(family: str, rows) -> list[list[torch.Tensor]]:
    """Per row, per clip, the prompt positions of its audio tokens, computed from the row layout."""
    frame = FAMILIES[family].frame_audio
    out = []
    for row in rows:
        position, clips = 0, []
        for kind, n in row:
            if kind == "text":
                position += n
            else:
                position += frame
                clips.append(torch.arange(position, position + n))
                position += n + frame
        out.append(clips)
    return out


@dataclass
class FixedPress(TokenDropPress):
    """Keeps given prompt positions (per row, no padding) whatever the evidence says."""

    keep: list[torch.Tensor] = field(default_factory=list)
    offsets: torch.Tensor | None = None  # (B,) left padding per row

    def select(self, clip, evidence):
        pad = int(self.offsets[clip.row]) if self.offsets is not None else 0
        positions = self.keep[clip.row] + pad
        return positions[(positions >= clip.start) & (positions < clip.end)]
