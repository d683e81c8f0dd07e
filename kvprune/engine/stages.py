"""What the pruning engine keeps about one forward call of a model under a press (``CallState``), and a
prefill's prompt read to the host once (``PromptOnHost``): the engine's hooks share them, call by call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .clips import Clip
from .compression import PrefillCompression
from .slots import CacheLayout, SlotMap
from .token_evidence import Evidence


@dataclass
class CallState:
    """State of one forward call of the model under the press."""

    cache: Any
    past_len: int
    n_new: int
    layout: CacheLayout | None = None
    padding: torch.Tensor | None = None  # the call's (B, past + new) attention mask, if it had one
    # set on a prefill that prunes:
    clips: list[list[Clip]] | None = None  # per row, every clip (every modality), by index
    drop_clips: list[list[Clip]] | None = None  # per row, the clips of the token-dropping press's scope
    offsets: torch.Tensor | None = None  # (B, S) position of each index within its unpadded row
    evidence: Evidence | None = None  # masks now; layer K-1's tensors once recorded
    unpruned: list[torch.Tensor] | None = None  # per row, on the device: positions no press may drop
    drop_pending: bool = False  # the token-dropping press has yet to choose (before layer K)
    drop_slots: SlotMap | None = None  # hidden-state slots of layers >= K during this prefill
    kept_counts: list[list[int]] | None = None  # per row and clip (every clip), the tokens layers >= K hold
    compression: PrefillCompression | None = None  # set when a cache press compresses this prefill
    hidden: torch.Tensor | None = None
    memo: dict = field(default_factory=dict)

    @property
    def prefill(self) -> bool:
        return self.clips is not None


@dataclass
class PromptOnHost:
    """A prefill's prompt, read to the host once, before the model queues any of its work."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    cache: Any
    host_ids: torch.Tensor = field(init=False)
    host_mask: torch.Tensor | None = field(init=False)  # the attention mask on the host (None: no mask)

    def __post_init__(self) -> None:
        if self.attention_mask is None:
            self.host_ids, self.host_mask = self.input_ids.cpu(), None
        elif self.attention_mask.device != self.input_ids.device:
            self.host_ids, self.host_mask = self.input_ids.cpu(), self.attention_mask.cpu()
        else:  # one transfer (one wait for the device) for both
            both = torch.stack([self.input_ids, self.attention_mask.to(self.input_ids.dtype)]).cpu()
            self.host_ids, self.host_mask = both[0], both[1]


def left_offsets(host_mask, host_ids) -> torch.Tensor:
    """Per position, its index within the row's prompt not counting padding (HF's position ids), on the host."""
    if host_mask is None:
        return torch.arange(host_ids.shape[1]).expand(host_ids.shape[0], -1)
    return (host_mask.long().cumsum(dim=1) - 1).clamp(min=0)
