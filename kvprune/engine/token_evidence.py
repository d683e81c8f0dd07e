"""Token evidence: what a token-dropping press chooses from, and how its choice becomes slots.

Before decoder layer K, the engine hands the token-dropping press an ``Evidence`` of the prompt
(which positions are candidates of its scope, which are media placeholders at all, which are
padding, and what layer K-1 computed, as the press ``needs``) and asks it, clip by clip, which
tokens to keep (``drop_slots``). Cache presses get their
own evidence, per layer, from ``kvprune.engine.cache_scoring``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from .clips import Clip
from .slots import SlotMap


@dataclass
class Evidence:
    """What layer K-1 computed for the prompt, for presses to score audio tokens with (batch-first).

    The masks come twice: on the model's device for tensor work, and on the host for bookkeeping
    (counts, positions) that would otherwise have to wait for the device in the middle of a prefill.
    """

    candidates: torch.Tensor  # (B, S) bool: placeholders of the press's scope (audio by default)
    valid: torch.Tensor  # (B, S) bool, False on padding
    host_candidates: torch.Tensor  # (B, S) bool, on the CPU
    host_valid: torch.Tensor  # (B, S) bool, on the CPU
    #: (B, S) bool on the CPU: a placeholder of any modality (False: text, special tokens, markers)
    host_placeholders: torch.Tensor | None = None
    attention: torch.Tensor | None = None  # (B, S) last prompt token's attention, mean over heads
    keys: torch.Tensor | None = None  # (B, kv_heads, S, head_dim) post-RoPE keys
    hidden: torch.Tensor | None = None  # (B, S, D) layer K-1 output after the final norm
    #: per row, a hash of its token ids (padding left out): what presses that draw at random seed with,
    #: so that two samples differ while a row alone or in a batch draws the same
    sample_keys: tuple[int, ...] = ()

    @classmethod
    def for_prompt(
        cls, candidates: torch.Tensor, valid: torch.Tensor, host_candidates: torch.Tensor | None = None,
        host_ids: torch.Tensor | None = None, host_placeholders: torch.Tensor | None = None,
        host_valid: torch.Tensor | None = None,
    ) -> "Evidence":
        host_candidates = candidates.cpu() if host_candidates is None else host_candidates
        host_valid = valid.cpu() if host_valid is None else host_valid
        keys = sample_keys(host_ids, host_valid) if host_ids is not None else ()
        placeholders = host_candidates if host_placeholders is None else host_placeholders
        return cls(candidates=candidates, valid=valid, host_candidates=host_candidates, host_valid=host_valid,
                   host_placeholders=placeholders, sample_keys=keys)

    @property
    def device(self) -> torch.device:
        """Where the press's choice goes: the device of the prompt's masks."""
        return self.candidates.device

    def unpruned_positions(self) -> list[torch.Tensor]:
        """Per row, on the device, the positions no token-dropping press may drop (all but its candidates), in
        order. Made where they are used: a stable sort of the candidates puts them first, and the host knows
        how many there are, so nothing is copied from the host (a pinned copy here left the GPU idle for
        4.7-7.2 ms at the start of a pruned prefill on an H100) or waited for."""
        first = torch.sort(self.candidates.to(torch.uint8), dim=-1, stable=True).indices
        return [row[:count] for row, count in zip(first, (~self.host_candidates).sum(dim=-1).tolist())]


def drop_slots(press, clips: list[list[Clip]], evidence: Evidence, unpruned: list[torch.Tensor], prompt_len: int):
    """A token-dropping press's decision for a prompt (``clips``: the clips of its scope): the slots
    layers >= K keep, and per row and clip the positions it chose. Nothing here waits for the device (shapes are known on the host):
    a stall in the middle of the prefill would expose the host's launch cost of every later layer."""
    kept_per_row, rows = [], []
    for row_clips, row_unpruned in zip(clips, unpruned):
        kept = [press.select(clip, evidence).to(row_unpruned.device) for clip in row_clips]
        kept_per_row.append(kept)
        rows.append(torch.cat([row_unpruned, *kept]).sort().values)
    return SlotMap.from_rows(rows, prompt_len), kept_per_row


def sample_keys(host_ids: torch.Tensor, host_valid: torch.Tensor) -> tuple[int, ...]:
    """Per row, a stable 63-bit hash of its token ids, padding left out (the same in any process,
    alone or in a batch): what presses that draw at random seed each sample with.

    The rows are cut in NumPy, not by torch's indexing, which stalls now and then on a GPU machine's host
    (``Clip.take`` says when)."""
    return tuple(_hash(ids[mask]) for ids, mask in zip(host_ids.numpy(), host_valid.numpy()))


def _hash(ids: np.ndarray) -> int:
    return int.from_bytes(hashlib.blake2b(ids.astype(np.int64).tobytes(), digest_size=8).digest(), "little") >> 1
