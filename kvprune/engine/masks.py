"""Restrict the attention masks HF builds for the full sequence to the slots a pruned layer keeps.

HF passes each decoder layer one of: ``None`` (sdpa, causal, no padding), a bool (B,1,q,kv) tensor
(sdpa), an additive float (B,1,q,kv) tensor (eager), or a (B,kv) padding mask (flash attention).
Each is gathered to the kept rows/columns in its own format, and filler slots are hidden. Slots kept
per head (head-wise compression) give a (B, heads, q, kv) mask, which sdpa and eager take as it is.
"""

from __future__ import annotations

import torch

from .slots import SlotMap

_NO_FLASH_PER_HEAD = (
    "flash attention takes one padding mask shared by all heads, so it cannot hide the entries that "
    "head-wise compression (adakv) evicted from some heads only; load the model with attn_implementation='sdpa' or 'eager'."
)


def is_flash(attn_implementation: str | None) -> bool:
    return bool(attn_implementation) and "flash" in attn_implementation


def restrict_mask(
    mask: torch.Tensor | None,
    cols: SlotMap,
    rows: SlotMap | None,
    query_index: torch.Tensor,
    *,
    attn_implementation: str,
    dtype: torch.dtype,
) -> torch.Tensor | None:
    """Mask for a pruned layer.

    ``cols`` are the layer's key slots; ``rows`` are given only at the pruning prefill, where the
    queries are pruned too; ``query_index`` (B|1, q) is each query's index in the full sequence.
    """
    if mask is None:
        if not cols.has_filler:
            return None  # causal over kept slots (prefill) or attend-all (decode): HF's own default
        return _build_mask(cols, rows, query_index, attn_implementation, dtype)
    cols, rows = cols.to(mask.device), rows.to(mask.device) if rows is not None else None
    if mask.dim() == 2:  # flash attention padding mask
        if cols.per_head:
            raise NotImplementedError(_NO_FLASH_PER_HEAD)
        gathered = mask.expand(cols.index.shape[0], -1).gather(1, cols.index)
        return gathered.masked_fill(~cols.valid, 0)
    col_index, col_valid = _per_head(cols)  # (B, heads or 1, L)
    batch = col_index.shape[0]
    mask = mask.expand(batch, max(mask.shape[1], col_index.shape[1]), -1, -1)
    heads = mask.shape[1]
    if rows is not None:
        mask = mask.gather(2, rows.index[:, None, :, None].expand(batch, heads, rows.width, mask.shape[3]))
    mask = mask.gather(3, col_index[:, :, None, :].expand(batch, heads, mask.shape[2], cols.width))
    blocked = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
    allowed = True if mask.dtype == torch.bool else 0.0
    mask = mask.masked_fill(~col_valid[:, :, None, :], blocked)
    if rows is not None and rows.has_filler:
        mask = _filler_rows_see_themselves(mask, rows, allowed, blocked)
    return mask


def _filler_rows_see_themselves(mask, rows: SlotMap, allowed, blocked):
    """A filler query must attend to something, or softmax gives NaN; let it see only its own slot."""
    width = rows.width
    eye = torch.eye(width, dtype=torch.bool, device=mask.device)
    filler_row = ~rows.valid[:, None, :, None]  # (B,1,L,1)
    mask = mask.masked_fill(filler_row & ~eye, blocked)
    return mask.masked_fill(filler_row & eye, allowed)


def _per_head(cols: SlotMap) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot index and validity as (B, heads, L): one row per attention head, or one shared by all."""
    if cols.per_head:
        return cols.index, cols.valid
    return cols.index[:, None], cols.valid[:, None]


def _build_mask(cols: SlotMap, rows: SlotMap | None, query_index, attn_implementation: str, dtype):
    """A mask where HF had none (no padding), needed because filler slots must be hidden."""
    if is_flash(attn_implementation):
        if cols.per_head:
            raise NotImplementedError(_NO_FLASH_PER_HEAD)
        return cols.valid.long()
    col_index, col_valid = _per_head(cols)
    # (B, heads or 1, q, kv)
    allowed = (col_index[:, :, None, :] <= query_index[:, None, :, None]) & col_valid[:, :, None, :]
    if rows is not None and rows.has_filler:
        allowed = _filler_rows_see_themselves(allowed, rows, True, False)
    if attn_implementation == "sdpa":
        return allowed
    if attn_implementation == "eager":
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )
    raise NotImplementedError(
        f"kvprune cannot build attention masks for {attn_implementation!r}; "
        "use 'sdpa', 'eager' or 'flash_attention_2'."
    )


def causal_mask(
    padding: torch.Tensor | None, past_len: int, n_new: int, batch: int, dtype, device
) -> torch.Tensor:
    """The (B, 1, n_new, past_len + n_new) mask HF builds for a continuation over the full sequence,
    from the call's 2-D padding mask: for layers whose HF mask was sized from another layer's cache."""
    total = past_len + n_new
    keys = torch.arange(total, device=device)
    allowed = keys[None, :] <= (past_len + torch.arange(n_new, device=device))[:, None]  # (q, kv)
    allowed = allowed[None, None].expand(batch, 1, n_new, total)
    if padding is not None:
        allowed = allowed & padding.to(device=device, dtype=torch.bool)[:, None, None, :]
    if dtype == torch.bool:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
