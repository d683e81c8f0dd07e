"""Per-layer attention masks while decoding, without hooks.

After pruning, each group of decoder layers holds other prompt entries, so each needs its own mask;
the model builds one. The decode step passes the masks of every layer as one keyword argument
(``kvprune_masks``), which every supported model hands down to its attention functions, and decoding
runs under an attention implementation registered here that picks its layer's mask and calls the stock
``sdpa`` or ``eager`` attention with it (under ``sdpa``, one new token per row goes to
``decode_attention``: a fused kernel on CUDA). Nothing is installed on the model, so a compiled step
holds no hook whose removal it could miss; the implementation name is switched on the decoder's config
only for the duration of decoding (``decoding_attention``).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from .decode_attention import decode_attention

MASKS_KWARG = "kvprune_masks"
LAST_SLOTS_KWARG = "kvprune_last_slots"  # per layer, each row's last slot that may be visible (its column)
FUSED_KWARG = "kvprune_fused_attention"  # False: the decode step's attention stays on the matmul path
IMPLEMENTATIONS = {"sdpa": "kvprune_decode_sdpa", "eager": "kvprune_decode_eager"}


def _layer_mask(module, attention_mask, kwargs):
    kwargs.pop(FUSED_KWARG, None)
    kwargs.pop(LAST_SLOTS_KWARG, None)
    masks = kwargs.pop(MASKS_KWARG, None)
    return attention_mask if masks is None else masks[module.layer_idx]


def _sdpa(module, query, key, value, attention_mask, **kwargs):
    fused = kwargs.get(FUSED_KWARG, True)
    last_slots = kwargs.get(LAST_SLOTS_KWARG)
    mask = _layer_mask(module, attention_mask, kwargs)
    if query.shape[2] == 1 and mask is not None:
        last = None if last_slots is None else last_slots[module.layer_idx]
        return decode_attention(query, key, value, mask, kwargs.get("scaling"), fused=fused, last_slots=last), None
    return sdpa_attention_forward(module, query, key, value, mask, **kwargs)


def _eager(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention (each modeling file has its own), with an additive mask."""
    mask = _layer_mask(module, attention_mask, kwargs)
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=mask.device).masked_fill(~mask, torch.finfo(query.dtype).min)
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, query, key, value, mask, **kwargs)


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
