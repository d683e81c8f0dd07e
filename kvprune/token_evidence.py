"""Token evidence: what a token-dropping press chooses from, and how its choice becomes slots.

Before decoder layer K, the engine hands the token-dropping press an ``Evidence`` of the prompt
(which positions are audio, which are padding, and what layer K-1 computed, as the press ``needs``)
and asks it, clip by clip, which audio tokens to keep (``drop_slots``). Cache presses get their
own evidence, per layer, from ``kvprune.cache_scoring``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .clips import AudioClip
from .compression import sample_keys
from .slots import SlotMap, to_device


@dataclass
class Evidence:
    """What layer K-1 computed for the prompt, for presses to score audio tokens with (batch-first).

    The masks come twice: on the model's device for tensor work, and on the host for bookkeeping
    (counts, positions) that would otherwise have to wait for the device in the middle of a prefill.
    """

    is_audio: torch.Tensor  # (B, S) bool
    valid: torch.Tensor  # (B, S) bool, False on padding
    host_is_audio: torch.Tensor  # (B, S) bool, on the CPU
    host_valid: torch.Tensor  # (B, S) bool, on the CPU
    attention: torch.Tensor | None = None  # (B, S) last prompt token's attention, mean over heads
    keys: torch.Tensor | None = None  # (B, kv_heads, S, head_dim) post-RoPE keys
    hidden: torch.Tensor | None = None  # (B, S, D) layer K-1 output after the final norm
    #: per row, a hash of its token ids (padding left out): what presses that draw at random seed with,
    #: so that two samples differ while a row alone or in a batch draws the same
    sample_keys: tuple[int, ...] = ()

    @classmethod
    def for_prompt(
        cls, is_audio: torch.Tensor, valid: torch.Tensor, host_is_audio: torch.Tensor | None = None,
        host_ids: torch.Tensor | None = None,
    ) -> "Evidence":
        host_is_audio = is_audio.cpu() if host_is_audio is None else host_is_audio
        host_valid = valid.cpu()
        keys = sample_keys(host_ids, host_valid) if host_ids is not None else ()
        return cls(is_audio=is_audio, valid=valid, host_is_audio=host_is_audio, host_valid=host_valid, sample_keys=keys)

    def unpruned_positions(self) -> list[torch.Tensor]:
        """Per row, on the device, the positions no token-dropping press may drop (all but audio)."""
        return [to_device((~row).nonzero().flatten(), self.is_audio.device) for row in self.host_is_audio]

    def masks_only(self) -> "Evidence":
        """The same prompt without layer K-1's tensors (which can be large)."""
        return Evidence(self.is_audio, self.valid, self.host_is_audio, self.host_valid, sample_keys=self.sample_keys)


def drop_slots(press, clips: list[list[AudioClip]], evidence: Evidence, unpruned: list[torch.Tensor], prompt_len: int):
    """A token-dropping press's decision for a prompt: the slots layers >= K keep, and per row and
    clip the positions it chose. Nothing here waits for the device (shapes are known on the host):
    a stall in the middle of the prefill would expose the host's launch cost of every later layer."""
    kept_per_row, rows = [], []
    for row_clips, row_unpruned in zip(clips, unpruned):
        kept = [press.select(clip, evidence).to(row_unpruned.device) for clip in row_clips]
        kept_per_row.append(kept)
        rows.append(torch.cat([row_unpruned, *kept]).sort().values)
    return SlotMap.from_rows(rows, prompt_len), kept_per_row
