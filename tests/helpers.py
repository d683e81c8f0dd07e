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


@dataclass(frozen=True)
class FixedPress(TokenDropPress):
    """Keeps given prompt positions (per row; rows without padding) whatever the evidence says."""

    keep: list[torch.Tensor] = field(default_factory=list)

    def select(self, clip, evidence):
        positions = self.keep[clip.row]
        return positions[(positions >= clip.start) & (positions < clip.end)]


def single_row(fam, rows, b, seed):
    """Row b of the batch built by ``fam.inputs(rows, seed)``, unpadded, with its own audio only."""
    batch = fam.inputs(rows, seed=seed)
    keep = batch["attention_mask"][b].bool()
    single = dict(input_ids=batch["input_ids"][b : b + 1, keep], attention_mask=batch["attention_mask"][b : b + 1, keep])
    clip_counts = [sum(kind == "audio" for kind, _ in row) for row in rows]
    first, count = sum(clip_counts[:b]), clip_counts[b]
    for name, value in batch.items():
        if name in single:
            continue
        if fam.name == "voxtral" and name == "input_features":  # 30 s chunks stacked on the batch axis
            per_clip = [n // fam.clip_multiple for row in rows for kind, n in row if kind == "audio"]
            start = sum(per_clip[:first])
            single[name] = value[start : start + sum(per_clip[first : first + count])]
        else:
            single[name] = value[first : first + count]
    return single
