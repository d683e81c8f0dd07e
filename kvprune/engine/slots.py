"""Which prompt positions each decoder layer's KV cache holds after pruning.

Rows of a batch may keep different numbers of tokens. They are stored as a rectangle of *slots*:
row ``b`` keeps ``n_b`` tokens and gets ``L - n_b`` filler slots on the left (like extra left padding),
which the attention mask hides. Tokens appended after the pruned prompt (decoding, later turns) are
all kept, so a layer's key columns are its prompt slots followed by every later position.

Head-wise compression (``adakv``) lets every KV head keep its own entries. Its slot map has one row of
slots per *attention* head, ``(B, heads, L)`` (heads that share a KV head share its slots), so that
masks need no knowledge of grouped-query attention; heads keeping fewer entries get more filler.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    """A host tensor on ``device`` without waiting for the device's queue (pinned, non-blocking copy)."""
    device = torch.device(device)
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


@dataclass
class SlotMap:
    """Slots of one pruned layer: absolute sequence index and validity of each cached prompt entry."""

    index: torch.Tensor  # (B, L) or per attention head (B, heads, L), long: index into the full (padded) prompt
    valid: torch.Tensor  # same shape, bool: False for filler slots (whose index is meaningless)
    prompt_len: int  # length of the full prompt the slots were taken from
    #: whether any slot is filler; read on every decoding step, so it is a host bool computed once
    #: (reading ``valid`` there would synchronise the device once per layer per token)
    has_filler: bool | None = None

    def __post_init__(self) -> None:
        if self.has_filler is None:
            self.has_filler = not bool(self.valid.all())

    @classmethod
    def identity(cls, batch: int, length: int, device) -> "SlotMap":
        """Every position of a ``length``-token prompt, in order: an unpruned layer."""
        index = torch.arange(length, device=device).expand(batch, -1)
        return cls(index=index, valid=torch.ones_like(index, dtype=torch.bool), prompt_len=length, has_filler=False)

    @classmethod
    def from_rows(cls, rows: list[torch.Tensor], prompt_len: int) -> "SlotMap":
        """Slots from each row's sorted kept positions, filler on the left.

        Widths come from the tensors' shapes, known on the host, so nothing waits for the device:
        this runs in the middle of a prefill, where a synchronisation would stall the GPU."""
        lengths = [len(row) for row in rows]
        width = max(lengths)
        device = rows[0].device
        index = torch.zeros(len(rows), width, dtype=torch.long, device=device)
        valid = torch.zeros(len(rows), width, dtype=torch.bool, device=device)
        for b, row in enumerate(rows):
            index[b, width - len(row) :] = row
            valid[b, width - len(row) :] = True
        return cls(index=index, valid=valid, prompt_len=prompt_len, has_filler=any(n != width for n in lengths))

    @classmethod
    def from_mask(cls, keep: torch.Tensor, counts: torch.Tensor, prompt_len: int) -> "SlotMap":
        """Slots of the True entries of ``keep`` ((B, L) or (B, heads, L)), in order, filler on the left.

        ``counts`` is a host tensor of the True entries per row (or row and head), known to the
        caller, so that the width is known without waiting for the device."""
        width = int(counts.max())
        order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)  # kept entries first, in order
        slot = torch.arange(width, device=keep.device)
        shift = to_device(width - counts, keep.device).unsqueeze(-1)
        index = order.gather(-1, (slot - shift).clamp(min=0))
        return cls(index=index, valid=slot >= shift, prompt_len=prompt_len, has_filler=bool((counts != width).any()))

    @property
    def per_head(self) -> bool:
        """Whether every attention head has its own slots (head-wise compression)."""
        return self.index.dim() == 3

    def select(self, chosen: "SlotMap") -> "SlotMap":
        """The slots ``chosen`` picks out of these (``chosen.index`` indexes this map's slots; it may
        be per head when these are not), on ``chosen``'s device (a layer's own, on a split model)."""
        index, valid = self.index.to(chosen.index.device), self.valid.to(chosen.index.device)
        if chosen.per_head and not self.per_head:
            heads = chosen.index.shape[1]
            index, valid = index[:, None].expand(-1, heads, -1), valid[:, None].expand(-1, heads, -1)
        return SlotMap(
            index=index.gather(-1, chosen.index),
            valid=chosen.valid & valid.gather(-1, chosen.index),
            prompt_len=self.prompt_len,
            has_filler=self.has_filler or chosen.has_filler,  # may overstate (harmless), never waits for the device
        )

    def to(self, device) -> "SlotMap":
        """The same slots on ``device`` (layers of a model split across devices get their own copy)."""
        if self.index.device == torch.device(device):
            return self
        return SlotMap(self.index.to(device), self.valid.to(device), self.prompt_len, self.has_filler)

    @property
    def width(self) -> int:
        return self.index.shape[-1]

    def columns(self, total_len: int) -> "SlotMap":
        """Key columns once ``total_len`` positions exist: the prompt slots, then everything after."""
        extra = total_len - self.prompt_len
        if extra <= 0:
            return self
        tail = torch.arange(self.prompt_len, total_len, device=self.index.device).expand(*self.index.shape[:-1], -1)
        return SlotMap(
            index=torch.cat([self.index, tail], dim=-1),
            valid=torch.cat([self.valid, torch.ones_like(tail, dtype=torch.bool)], dim=-1),
            prompt_len=self.prompt_len,
            has_filler=self.has_filler,
        )


@dataclass
class CacheSlots:
    """Per decoder layer, the slots its cache holds (``None``: every position, unpruned)."""

    layers: list[SlotMap | None]

    @property
    def pruned(self) -> bool:
        return any(slots is not None for slots in self.layers)

    def __getitem__(self, layer_idx: int) -> SlotMap | None:
        return self.layers[layer_idx]
