"""Cache compression during one prefill: what the engine does for cache presses after each layer.

For every layer a cache press compresses, ``PrefillCompression.compress``:

1. lays out the ``CacheEvidence``: the prompt position each cached entry holds, whether it is audio,
   its clip, and the press's candidates grouped for budgets (its *scope*);
2. asks the press for scores, and for each group's budget (``press.keep``);
3. lets the press choose the entries to keep (``press.choose``: one set per layer, or per head) and
   gathers the layer's keys and values to them, in place.

Scopes: ``"audio"`` (default) makes every audio entry a candidate, grouped by clip, and keeps all
text and markers; ``"video"`` does the same for the visual entries (video frames, images) and
``"audio+video"`` for both, each clip its own group (``kvprune.engine.clips``: a sound track interleaved
with its video is one clip). ``"prompt"`` makes a candidate of every prompt entry except the chat
template's header (everything before the row's first clip of any modality: system prompt, user turn
opening) and the last
``press.window`` entries of the layer's cache (the question that follows the audio and the assistant
turn opening), all in one group per row: the whole-prompt compression of NVIDIA kvpress as
AudioMarathon ran it, but with its protected template, for comparison with their numbers.

Counts (entries per clip, per row) are kept on the host, so budgets and cache widths never wait for
the device. The exception is head-wise selection, whose per-head counts are read back once per
compressed layer to size the layer's cache to the fullest head.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from .cache_scoring import CacheEvidence
from .clips import CODES, MODALITIES, SCOPE_MODALITIES, TOKEN_SCOPES, Clip
from .slots import SlotMap, to_device
from .token_evidence import Evidence

SCOPES = (*TOKEN_SCOPES, "prompt")


@dataclass
class LayerPrefill:
    """What the engine saw of one decoder layer's prefill, for compressing its cache."""

    index: int
    cache: Any  # the layer's cache (``keys``, ``values``: (B, kv_heads, L, head_dim))
    slots: SlotMap  # the prompt entries the cache holds now
    query_slots: SlotMap  # the prompt rows the layer's prefill computed (its query rows)
    clip_entries: list[list[int]]  # per row and clip (every clip, by index), the entries the layer's prefill computed
    kv_groups: int  # attention heads per KV head
    queries: torch.Tensor | None = None  # recorded post-RoPE queries of the last query rows
    scaling: float | None = None
    rope: tuple[torch.Tensor, torch.Tensor] | None = None
    rope_frequencies: torch.Tensor | None = None


@dataclass
class _Counts:
    """Per row, the prompt entries one layer's cache holds, in all and per clip, every clip by its
    index (``None`` once a press with scope="prompt" compressed it: clips then lose unknown numbers
    of entries)."""

    valid: list[int]
    clips: list[list[int]] | None


@dataclass
class _Tables:
    """Per prompt index (B, S): its clip number (-1: not in a clip of the scope), its position without
    left padding, whether it is a prompt token, whether it is an audio placeholder; and per row
    (B, 1), the chat template header's length."""

    clip_of: torch.Tensor
    offsets: torch.Tensor
    valid: torch.Tensor
    is_audio: torch.Tensor
    header: torch.Tensor


class PrefillCompression:
    """The prompt's tables (on the device, built once per prefill) and each layer's host counts.
    ``prompt``: the prompt's masks and sample keys (an ``Evidence``, the token press's, which every prefill
    that prunes makes); ``clips`` are every clip of the prompt (``kvprune.engine.clips.clips_of``), ``offsets``
    each position's place in its unpadded row, ``kinds`` its placeholder kinds, ``scope`` the cache presses'
    (composed cache presses share one)."""

    def __init__(self, prompt: Evidence, clips: list[list[Clip]], offsets: torch.Tensor, kinds: torch.Tensor, scope: str):
        host_valid, valid = prompt.host_valid, prompt.valid
        modalities = SCOPE_MODALITIES.get(scope, ())  # scope="prompt" groups by row, not by clip
        clip_of = torch.full(host_valid.shape, -1, dtype=torch.long)
        for row in clips:
            for clip in row:
                if clip.modality in modalities:  # by slices: torch's index kernel stalls now and then on a GPU host (Clip.take)
                    for start, end in clip.spans:
                        clip_of[clip.row, start:end] = clip.index
        pads = (~host_valid).sum(dim=1).tolist()
        self.lengths = host_valid.sum(dim=1).tolist()
        self.clip_lengths = [[clip.length for clip in row] for row in clips]
        self.in_scope = [[clip.modality in modalities for clip in row] for row in clips]
        # the chat template's header: every entry before the row's first clip (all of it without media)
        self.header = [row[0].start - pad if row else length for row, pad, length in zip(clips, pads, self.lengths)]
        self.sample_keys = prompt.sample_keys
        device = valid.device
        self._tables = {device: _Tables(to_device(clip_of, device), to_device(offsets, device), valid,
                                        to_device(kinds == CODES["audio"], device),
                                        to_device(torch.tensor(self.header)[:, None], device))}
        self._counts: dict[int, _Counts] = {}

    def compress(self, press, layer: LayerPrefill, n_layers: int) -> tuple[SlotMap, list[int], list[int]]:
        """Compress ``layer``'s cache with ``press`` (one of the model's first ``n_layers`` layers, those
        that hold a cache of their own); returns its new slots and, per row, the press's candidate
        entries before and after."""
        if layer.index not in self._counts:  # the layer's first compression: what its prefill computed
            self._counts[layer.index] = _Counts(
                [length - sum(n) + sum(kept) for length, n, kept in zip(self.lengths, self.clip_lengths, layer.clip_entries)],
                [list(row) for row in layer.clip_entries],
            )
        counts = self._counts[layer.index]
        evidence = self.evidence(press, layer)
        sizes = self._group_sizes(press, counts)
        budgets = [[press.keep(n, layer.index, n_layers) if n else 0 for n in row] for row in sizes]
        scores = press.score(evidence)
        scores = scores.float().masked_fill(~evidence.candidates.unsqueeze(1) if scores.dim() == 3 else ~evidence.candidates, 0.0)
        width = max(len(row) for row in budgets) or 1
        budget_table = to_device(torch.tensor([row + [0] * (width - len(row)) for row in budgets], dtype=torch.long),
                                 scores.device)
        keep = press.choose(scores, evidence, budget_table)
        slots = layer.slots.width
        evicted = [sum(sizes_row) - sum(kept_row) for sizes_row, kept_row in zip(sizes, budgets)]
        if keep.dim() == 3:  # head-wise: each head's count is known only on the device
            chosen = self._per_head_slots(keep, layer)
        else:
            chosen = SlotMap.from_mask(keep, torch.tensor([slots - e for e in evicted]), prompt_len=slots)
        layer.cache.keys = _gather_slots(layer.cache.keys, chosen.index)
        layer.cache.values = _gather_slots(layer.cache.values, chosen.index)
        counts.valid = [v - e for v, e in zip(counts.valid, evicted)]
        counts.clips = None if press.scope == "prompt" else [
            [kept if scoped else held for kept, held, scoped in zip(budget_row, held_row, scope_row)]
            for budget_row, held_row, scope_row in zip(budgets, counts.clips, self.in_scope)
        ]
        return layer.slots.select(chosen), [sum(row) for row in sizes], [sum(row) for row in budgets]

    def evidence(self, press, layer: LayerPrefill) -> CacheEvidence:
        """The evidence ``press`` scores layer ``layer.index`` with, on the device of the layer's cache."""
        tables = self._tables_on(layer.cache.keys.device)
        slots = layer.slots.to(layer.cache.keys.device)
        valid = slots.valid & tables.valid.gather(1, slots.index)
        positions = tables.offsets.gather(1, slots.index)
        clip = tables.clip_of.gather(1, slots.index).masked_fill(~valid, -1)
        if press.scope != "prompt":
            groups = clip
        else:
            from_end = valid.flip(-1).cumsum(dim=-1).flip(-1)  # valid entries at or after each one
            candidate = valid & (positions >= tables.header) & (from_end > press.window)
            groups = torch.where(candidate, 0, -1)
        evidence = CacheEvidence(
            layer=layer.index, keys=layer.cache.keys, values=layer.cache.values, positions=positions, valid=valid,
            is_audio=tables.is_audio.gather(1, slots.index) & valid, clip=clip, groups=groups, rope_frequencies=layer.rope_frequencies,
            # the decoder computes the rotary embedding once, on its first layer's device
            rope=None if layer.rope is None else tuple(t.to(layer.cache.keys.device) for t in layer.rope),
            scaling=layer.scaling, sample_keys=self.sample_keys, prompt_lengths=tuple(self.lengths),
        )
        if layer.queries is not None:
            query_slots = layer.query_slots.to(slots.index.device)
            rows = query_slots.index[:, -layer.queries.shape[2] :]
            evidence.queries = layer.queries
            evidence.query_positions = tables.offsets.gather(1, rows)
            evidence.query_valid = query_slots.valid[:, -rows.shape[1] :] & tables.valid.gather(1, rows)
        return evidence

    def _tables_on(self, device) -> "_Tables":
        """The prompt's tables on ``device`` (layers of a model split across devices get their own copy)."""
        device = torch.device(device)
        if device not in self._tables:
            first = next(iter(self._tables.values()))
            self._tables[device] = _Tables(*(getattr(first, f.name).to(device) for f in fields(_Tables)))
        return self._tables[device]

    def _group_sizes(self, press, counts: _Counts) -> list[list[int]]:
        """Per row, the candidates of each budget group (a clip's index; 0 for clips outside the
        scope), from host counts."""
        if press.scope != "prompt":
            if counts.clips is None:
                raise RuntimeError(f"a cache press with scope={press.scope!r} follows one with scope='prompt' on the same layer.")
            return [[held if scoped else 0 for held, scoped in zip(row, scope_row)]
                    for row, scope_row in zip(counts.clips, self.in_scope)]
        return [[max(0, valid - header - press.window)] for valid, header in zip(counts.valid, self.header)]

    def _per_head_slots(self, keep: torch.Tensor, layer: LayerPrefill) -> SlotMap:
        """Slots per attention head from a per-KV-head keep mask. Each head's count is read back from
        the device (one wait per layer), so that the cache is as wide as its fullest head."""
        keep = keep.repeat_interleave(layer.kv_groups, dim=1)
        return SlotMap.from_mask(keep, keep.sum(dim=-1).cpu(), prompt_len=layer.slots.width)


def has_candidates(clips: list[list[Clip]], scope: str) -> bool:
    """Whether the prompt holds a clip that ``scope`` covers ("prompt": any clip at all)."""
    modalities = MODALITIES if scope == "prompt" else SCOPE_MODALITIES[scope]
    return any(clip.modality in modalities for row in clips for clip in row)


def _gather_slots(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Gather a (B, kv_heads, L, head_dim) cache tensor along its slots with a (B, L') index, or a
    per-attention-head (B, heads, L') index (heads sharing a KV head share its slots)."""
    batch, kv_heads, _, dim = tensor.shape
    index = index.to(tensor.device)
    if index.dim() == 3:
        index = index[:, :: index.shape[1] // kv_heads]
    else:
        index = index[:, None].expand(batch, kv_heads, -1)
    return tensor.gather(2, index[..., None].expand(-1, -1, -1, dim))
