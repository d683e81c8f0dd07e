"""What a decoder layer is given under pruning: its arguments gathered to the slots its cache holds.

During a prefill that drops tokens, every layer from K on gets the hidden states (gathered once, at
layer K), the rotary embeddings, position ids, attention mask and per-token inputs gathered to the
kept slots (``prefill_arguments``). On later calls (decoding, another turn) a layer whose cache
differs from the full prompt gets the attention mask restricted to its slots
(``continuation_arguments``). Both take the stage of the forward call (``kvprune.engine.stages``: its
slots, lengths, padding and ``memo``), in which what every layer shares is gathered once per call.
"""

from __future__ import annotations

import torch

from .masks import causal_mask, is_flash, restrict_mask
from ..models.layer_io import LayerIO
from .slots import SlotMap
from .stages import Continuation, PruningPrefill


def prefill_arguments(call: PruningPrefill, first: bool, io: LayerIO, attn_implementation: str, args, kwargs):
    """A layer's arguments during a prefill whose tokens were dropped; ``first``: it is layer K, whose
    hidden states still hold every prompt position."""
    slots = call.dropped.slots
    if first:
        hidden = args[0] if args else kwargs.pop("hidden_states")
        args = (gather_seq(hidden, slots.index, io.hidden_axis), *args[1:])
    key = ("prefill", id(kwargs.get("attention_mask")), id(kwargs.get("position_embeddings")))
    if key not in call.memo:
        call.memo[key] = _gather_prefill_kwargs(kwargs, slots, attn_implementation)
    kwargs.update(call.memo[key])
    for name in io.token_args:  # a different tensor for every layer
        if kwargs.get(name) is not None:
            kwargs[name] = gather_seq(kwargs[name], slots.index)
    return args, kwargs


def _gather_prefill_kwargs(kwargs, slots: SlotMap, attn_implementation: str) -> dict:
    updates = {}
    cos_sin = kwargs.get("position_embeddings")
    if cos_sin is not None:
        updates["position_embeddings"] = tuple(gather_seq(t, slots.index) for t in cos_sin)
    position_ids = kwargs.get("position_ids")
    if position_ids is not None:
        # flash attention reads gaps in position ids as packed sequences; RoPE is already in cos/sin
        updates["position_ids"] = None if is_flash(attn_implementation) else gather_seq(position_ids, slots.index)
    if "attention_mask" in kwargs:
        updates["attention_mask"] = restrict_mask(
            kwargs["attention_mask"],
            cols=slots,
            rows=slots,
            query_index=slots.index,
            attn_implementation=attn_implementation,
            dtype=_dtype_of(kwargs),
        )
    return updates


def continuation_arguments(call: Continuation, slots: SlotMap, attn_implementation: str, args, kwargs):
    """A layer's arguments on a call that continues a pruned cache: the mask restricted to its slots
    (None: nothing to change)."""
    mask = kwargs.get("attention_mask")
    if mask is None and not slots.has_filler:
        return None
    total = call.past_len + call.n_new
    if mask is not None and mask.dim() == 4 and mask.shape[-1] != total:
        # HF sized it from a pruned layer's cache (Gemma-3n: its first full-attention layer)
        mask = causal_mask(call.padding, call.past_len, call.n_new, mask.shape[0], mask.dtype, mask.device)
    key = ("continuation", id(slots), id(mask))
    if key not in call.memo:
        query_index = torch.arange(call.past_len, total, device=slots.index.device)[None]
        call.memo[key] = restrict_mask(
            mask,
            cols=slots.columns(total),
            rows=None,
            query_index=query_index,
            attn_implementation=attn_implementation,
            dtype=_dtype_of(kwargs),
        )
    kwargs["attention_mask"] = call.memo[key]
    return args, kwargs


def gather_seq(tensor: torch.Tensor, index: torch.Tensor, axis: int = 1) -> torch.Tensor:
    """Gather a tensor along its sequence ``axis`` with a (B, L) index; the batch axis comes just
    before it, of size B or 1: (B|1, S), (B|1, S, ...), or (n, B|1, S, ...) for Gemma-3n's streams."""
    batch = index.shape[0]
    shape = list(tensor.shape)
    shape[axis - 1] = batch
    tensor = tensor.expand(*shape)
    view = [1] * tensor.dim()
    view[axis - 1], view[axis] = batch, index.shape[1]
    shape[axis] = index.shape[1]
    return tensor.gather(axis, index.to(tensor.device).view(view).expand(*shape))


def _dtype_of(kwargs) -> torch.dtype:
    cos_sin = kwargs.get("position_embeddings")
    return cos_sin[0].dtype if cos_sin is not None else torch.get_default_dtype()
