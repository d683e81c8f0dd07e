"""The stages of one forward call of a model under a press, each holding only what is valid while it lasts.

The session's hooks share the stage of the call under way (``PressSession``); a call has one of:

* ``PromptOnHost``: a prefill's prompt, read to the host by the entry module's pre-hook, until decoder
  layer 0 sets the prefill up (host bookkeeping done while the device encodes the audio).
* ``PruningPrefill``: a prefill that prunes: every clip of the prompt and the slots its layers' caches
  hold, layer by layer (``cache_slots``), with the work of each kind of press:

  - ``drop``: the token-dropping press's, a ``PendingDrop`` before layer K (what it chooses from), a
    ``DroppedTokens`` from layer K on (the slots layers >= K hold); None when no press drops tokens;
  - ``compression``: the cache presses' (``kvprune.engine.compression.PrefillCompression``: the
    prompt's tables and each layer's counts); None when no cache press compresses.
* ``Continuation``: a later call (decoding, another turn) on a dynamic cache that a prefill pruned:
  the slots its layers' masks are restricted to.

A call with nothing to prune and no pruned cache to continue has no stage: the model runs as stock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .clips import Clip
from .compression import PrefillCompression
from .slots import CacheSlots, SlotMap
from .token_evidence import Evidence


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

    def offsets(self) -> torch.Tensor:
        """Per position, its index within the row's prompt not counting padding (HF's position ids), on the host."""
        if self.host_mask is None:
            return torch.arange(self.host_ids.shape[1]).expand(self.host_ids.shape[0], -1)
        return (self.host_mask.long().cumsum(dim=1) - 1).clamp(min=0)


@dataclass
class PendingDrop:
    """The token-dropping press's work before layer K: the clips of its scope it chooses from, per row,
    with the evidence it reads (layer K-1's tensors added when recorded) and what it may not drop."""

    clips: list[list[Clip]]  # per row, the clips of the press's scope
    offsets: torch.Tensor  # (B, S) on the host: position of each index within its unpadded row
    evidence: Evidence
    unpruned: list[torch.Tensor]  # per row, on the device: positions no press may drop
    hidden: torch.Tensor | None = None  # layer K-1's output, when the press reads it (recorded by its forward hook)


@dataclass(frozen=True)
class DroppedTokens:
    """What the token-dropping press chose, from layer K on: the hidden-state slots of layers >= K and,
    per row and clip (every clip, by index), the tokens those layers hold."""

    slots: SlotMap
    kept_counts: list[list[int]]


@dataclass
class PruningPrefill:
    """A prefill that prunes (see the module's docstring)."""

    cache: Any
    n_new: int  # the prompt's length (padded)
    cache_slots: CacheSlots  # filled layer by layer: the prompt entries each layer's cache holds (None: all)
    clips: list[list[Clip]]  # per row, every clip (every modality), by index
    drop: PendingDrop | DroppedTokens | None
    compression: PrefillCompression | None
    memo: dict = field(default_factory=dict)  # what every layer shares, gathered once (``layer_arguments``)

    @property
    def dropped(self) -> DroppedTokens | None:
        """The token-dropping press's choice, once made (from layer K on)."""
        return self.drop if isinstance(self.drop, DroppedTokens) else None


@dataclass
class Continuation:
    """A call that continues a dynamic cache a prefill pruned: its slots, lengths and padding."""

    cache: Any
    past_len: int
    n_new: int
    cache_slots: CacheSlots
    padding: torch.Tensor | None  # the call's (B, past + new) attention mask, if it had one
    memo: dict = field(default_factory=dict)
