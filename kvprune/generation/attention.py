"""Per-layer attention masks while decoding, without hooks.

After pruning, each group of decoder layers holds other prompt entries, so each needs its own mask;
the model builds one. The decode step passes the masks of every layer as one keyword argument
(``kvprune_masks``), which every supported model hands down to its attention functions, and decoding
runs under an attention implementation registered here that picks its layer's mask and calls the stock
``sdpa`` or ``eager`` attention with it (under ``sdpa``, one new token per row goes to
``decode_attention``: a fused kernel on CUDA). Nothing is installed on the model, so a compiled step
holds no hook whose removal it could miss; the implementation name is switched on the decoder's config
only for the duration of decoding (``decoding_attention``).

The decode cache's ``update`` leaves each layer's new key and value unwritten (``kvprune_cache_layers``): the
attention writes them, in its own kernel where the fused kernels run (one launch a layer fewer), else with
``column_write`` before it attends.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from .column_write import write_column
from .decode_attention import decode_attention

MASKS_KWARG = "kvprune_masks"
LAST_SLOTS_KWARG = "kvprune_last_slots"  # per layer, each row's last slot that may be visible (its column)
FUSED_KWARG = "kvprune_fused_attention"  # False: the decode step's attention stays on the matmul path
CACHE_LAYERS_KWARG = "kvprune_cache_layers"  # per layer, the cache layer holding its new entries, unwritten
IMPLEMENTATIONS = {"sdpa": "kvprune_decode_sdpa", "eager": "kvprune_decode_eager"}


def _layer_mask(module, attention_mask, kwargs):
    kwargs.pop(FUSED_KWARG, None)
    kwargs.pop(LAST_SLOTS_KWARG, None)
    kwargs.pop(CACHE_LAYERS_KWARG, None)
    masks = kwargs.pop(MASKS_KWARG, None)
    return attention_mask if masks is None else masks[module.layer_idx]


def _new_entries(module, kwargs) -> tuple:
    """(each row's last slot, its new key and value: None where the cache wrote them) of the module's layer."""
    last_slots, layers = kwargs.get(LAST_SLOTS_KWARG), kwargs.get(CACHE_LAYERS_KWARG)
    last = None if last_slots is None else last_slots[module.layer_idx]
    return last, None if layers is None else layers[module.layer_idx].take_new_entries()


def _sdpa(module, query, key, value, attention_mask, **kwargs):
    fused = kwargs.get(FUSED_KWARG, True)
    last, new = _new_entries(module, kwargs)
    mask = _layer_mask(module, attention_mask, kwargs)
    if query.shape[2] == 1 and mask is not None:
        output = decode_attention(query, key, value, mask, kwargs.get("scaling"), fused=fused, last_slots=last,
                                  new_entries=new)
        return output, None
    _write(key, value, last, new)
    return sdpa_attention_forward(module, query, key, value, mask, **kwargs)


def _eager(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention (each modeling file has its own), with an additive mask."""
    _write(key, value, *_new_entries(module, kwargs))
    mask = _layer_mask(module, attention_mask, kwargs)
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=mask.device).masked_fill(~mask, torch.finfo(query.dtype).min)
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, query, key, value, mask, **kwargs)


def _write(key, value, last_slots, new_entries) -> None:
    """The layer's new entries at each row's last slot, where no attention kernel writes them."""
    if new_entries is not None:
        write_column(key, value, last_slots, *new_entries)


AttentionInterface.register(IMPLEMENTATIONS["sdpa"], _sdpa)
AttentionInterface.register(IMPLEMENTATIONS["eager"], _eager)
for _name in IMPLEMENTATIONS.values():
    AttentionMaskInterface.register(_name, sdpa_mask)


def unsupported_attention(config) -> str | None:
    """Why decoding cannot mask per layer under this attention implementation (None: it can)."""
    if config._attn_implementation in IMPLEMENTATIONS or config._attn_implementation in IMPLEMENTATIONS.values():
        return None
    return (
        f"attn_implementation={config._attn_implementation!r}: the engine masks each layer's cache under "
        "'sdpa' or 'eager' only"
    )


@contextmanager
def decoding_attention(config):
    """The decoder's attention reads its layer's mask from ``kvprune_masks`` inside the block."""
    original = config._attn_implementation
    config._attn_implementation = IMPLEMENTATIONS.get(original, original)
    try:
        yield
    finally:
        config._attn_implementation = original
