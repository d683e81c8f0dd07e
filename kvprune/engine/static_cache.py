"""Static KV caches for pruned prompts, so that decoding after pruning compiles (torch.compile, CUDA graphs).

Hugging Face's ``StaticCache`` preallocates every layer at one length (``max_cache_len``) and builds
one attention mask per step over that length, sized from cache layer 0. After pruning, layers >= K
hold fewer prompt entries than layer 0, so neither fits them. What this module does, in three steps:

1. **adopt** (before a pruning prefill): a fresh static cache (``cache_implementation="static"``, or
   a ``StaticCache`` the caller passes) gets ``PrunedStaticLayer`` layers. Until the prefill ends they
   grow like dynamic layers, so the prefill (token dropping, cache presses) runs exactly as on the
   dynamic cache, and ``generate``'s prefill mask, which spans the whole static length, is cut to the
   prompt (``prompt_mask``).
2. **freeze** (after it): each layer allocates its own static buffers, of its own length: the entries
   it kept plus the room the static cache leaves after the prompt (``max_cache_len - prompt
   length``), and records for each of its slots the column of layer 0's mask that slot stands for
   (``columns``; filler slots of a padded batch are marked invalid).
3. **decode**: HF still builds one mask from layer 0, which stays full length (causality, padding,
   unwritten slots). Before each pruned layer, ``layer_mask`` gathers that mask to the layer's
   columns. Only tensor ops on tensors whose addresses never change: no host synchronisation and no
   Python state per call, so the decode step compiles into one graph and replays as a CUDA graph.

The same code runs uncompiled (CPU, or a GPU without compilation): the compiled path is not a
different algorithm, only the same one traced.

Models whose static cache has sliding-window layers or whose layers reuse another layer's cache
(Gemma-3n) are refused up front (``check_prunable``): every layer's mask is gathered from layer 0's
full-attention one by the slots of its own cache, which neither kind of layer fits. The dynamic
cache prunes them exactly.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import StaticCache, StaticLayer

from .attention_probe import key_validity
from ..compat import find_cache
from .masks import restrict_mask
from .slots import CacheSlots, SlotMap


class PrunedStaticLayer(StaticLayer):
    """A static cache layer whose length is its own: the prompt entries it keeps plus room for new tokens.

    Before ``freeze`` it holds the prefill's keys and values as given (like a dynamic layer) and reports
    dynamic sizes, so the prefill needs nothing special. After ``freeze`` it is a ``StaticLayer`` of
    ``max_cache_len = entries kept + room`` (writes at its own next slot, static addresses), plus
    ``slots``: for each of its slots, the column of the full-length mask it stands for, or ``None``
    when the layer holds every prompt position (its mask is layer 0's as is).
    """

    def __init__(self, max_cache_len: int):
        super().__init__(max_cache_len=max_cache_len)
        self.full_len = max_cache_len  # the static length the cache was made with (layer 0's, after freeze)
        self.frozen = False
        self.slots: SlotMap | None = None

    # -- before freeze: the prefill ------------------------------------------------------------
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.frozen:
            return super().update(key_states, value_states, *args, **kwargs)
        if self.keys is None:
            self.keys, self.values = key_states, value_states
        else:
            self.keys = torch.cat([self.keys, key_states], dim=-2)
            self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values

    def get_seq_length(self):
        if self.frozen:
            return super().get_seq_length()
        return 0 if self.keys is None else self.keys.shape[-2]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self.frozen:
            return super().get_mask_sizes(query_length)
        return self.get_seq_length() + query_length, 0

    def reset(self) -> None:
        """Back to a fresh layer of the original static length (its own length fitted the old prompt only)."""
        self.keys = self.values = None
        self.max_cache_len = self.full_len
        self.cumulative_length = torch.zeros_like(self.cumulative_length)
        self.is_initialized = self.frozen = False
        self.slots = None

    # -- freeze: own static buffers ------------------------------------------------------------
    def freeze(self, slots: SlotMap | None, prompt_len: int, shared: dict) -> None:
        """Move the prefill's entries into static buffers of this layer's own length.

        ``slots`` are the prompt slots the layer holds (``None``: every position); ``shared`` maps
        ``id(slots)`` to column maps already built, so layers with the same slots share one tensor."""
        keys, values = self.keys, self.values
        held = keys.shape[-2]
        room = self.full_len - prompt_len
        self.max_cache_len = held + room
        self.keys = self.values = None
        # transformers' own allocation (it differs between versions) and static-address marking
        self.lazy_initialization(keys[..., :0, :], values[..., :0, :])
        self.keys[:, :, :held].copy_(keys)
        self.values[:, :, :held].copy_(values)
        self.cumulative_length.fill_(held)
        if slots is not None:
            if id(slots) not in shared:
                shared[id(slots)] = _slot_columns(slots.to(self.device), prompt_len, room)
            self.slots = shared[id(slots)]
        self.frozen = True


def _slot_columns(slots: SlotMap, prompt_len: int, room: int) -> SlotMap:
    """Columns of a frozen layer: its prompt slots, then one column per later position, in order."""
    columns = slots.columns(prompt_len + room)
    if not torch.compiler.is_compiling():
        torch._dynamo.mark_static_address(columns.index)
        torch._dynamo.mark_static_address(columns.valid)
    return columns


def is_static(cache) -> bool:
    """Whether ``cache`` is a static cache (stock or adopted): layers of fixed length once filled."""
    layers = getattr(cache, "layers", None)
    # len(), not bool(): torch 2.11's dynamo cannot trace bool() of a list, and this runs in every
    # compiled decoding step (a graph break there costs a recompile per layer)
    return layers is not None and len(layers) > 0 and isinstance(layers[0], StaticLayer)


def is_frozen(cache) -> bool:
    """Whether ``cache`` holds a pruned prompt in its own static buffers (decoding or a later turn)."""
    return is_static(cache) and isinstance(cache.layers[0], PrunedStaticLayer) and cache.layers[0].frozen


def holds_tokens(cache, new_tokens: int) -> bool:
    """Whether a static cache already holds tokens, i.e. a call of ``new_tokens`` continues it.

    Answered without waiting for the device wherever it can be: adopted layers know it on the
    host; a stock static layer is empty until first written; a one-token call (a decoding step)
    prunes nothing either way, and inside a compiled graph (which only decoding is) it is a
    continuation by construction. Otherwise (a prompt on a reused stock cache) the length is read."""
    first = cache.layers[0]
    if isinstance(first, PrunedStaticLayer):
        return first.frozen or first.keys is not None
    if not first.is_initialized:
        return False
    return new_tokens == 1 or torch.compiler.is_compiling() or int(first.get_seq_length()) > 0


def check_model(config, model_name: str, kv_sources: dict[int, int]) -> None:
    """``check_prunable`` for the static cache ``generate`` makes from a model's ``config``, before the
    model has run (the cache's layers allocate nothing until they are first filled)."""
    check_prunable(StaticCache(config=config, max_cache_len=1), model_name, kv_sources)


def check_prunable(cache, model_name: str, kv_sources: dict[int, int]) -> None:
    """Refuse a static cache that a pruned prompt cannot lay out exactly, before anything runs (whatever
    the prompt holds, so that a model is refused on its first call, not on its first audio)."""
    if getattr(cache, "offloading", False):
        raise NotImplementedError(
            "kvprune cannot prune into an offloaded static cache; use cache_implementation='static' "
            "(not 'offloaded_static') or the default dynamic cache."
        )
    reasons = []
    others = [j for j, layer in enumerate(cache.layers) if not isinstance(layer, PrunedStaticLayer) and type(layer) is not StaticLayer]
    if others:  # sliding-window layers: HF masks them by their own window and ring buffer
        reasons.append(
            f"only full-attention static layers hold a pruned prompt at a length of their own, and its layer "
            f"{others[0]} is a {type(cache.layers[others[0]]).__name__}"
        )
    if kv_sources:  # a sharing layer's own cache layer stays empty: there are no slots to mask it by
        reasons.append(
            f"its layers {min(kv_sources)}.. attend to the caches of layers {sorted(set(kv_sources.values()))}, "
            "while decoding on a pruned static cache masks every layer by the slots its own cache holds"
        )
    if reasons:
        raise NotImplementedError(
            f"{model_name}: kvprune cannot prune into a static cache of this model: {'; '.join(reasons)}. "
            f"Use the default dynamic cache (no cache_implementation='static', no StaticCache), where {model_name} "
            "is pruned exactly."
        )


def adopt(cache) -> None:
    """Before a prefill that prunes: give a fresh static cache (``check_prunable``) layers that hold
    their own lengths."""
    for j, layer in enumerate(cache.layers):
        if not isinstance(layer, PrunedStaticLayer):
            cache.layers[j] = PrunedStaticLayer(layer.max_cache_len)


def freeze(cache, cache_slots: CacheSlots, prompt_len: int) -> None:
    """After a prefill that pruned: every layer moves to its own static buffers (see ``PrunedStaticLayer``)."""
    shared: dict = {}
    for j, layer in enumerate(cache.layers):
        layer.freeze(cache_slots[j], prompt_len, shared)


def prompt_padding(mask, prompt_len: int) -> torch.Tensor | None:
    """The (B, S) padding mask of a prompt from the mask ``generate`` passes with a static cache.

    With a compileable cache, ``generate`` turns the 2-D mask into a 4-D one over the whole static
    length before the forward call (transformers 5.24 also when there is no padding, 5.17 only when
    a 2-D mask is given); a 4-D mask's last query row sees every prompt position that is not padding."""
    if isinstance(mask, dict):
        mask = next(iter(mask.values()))
    if mask is None or mask.dim() == 2:
        return mask
    return key_validity(mask[..., :prompt_len], mask.shape[0], prompt_len, mask.device)


def prompt_mask(mask, prompt_len: int):
    """``generate``'s prefill mask, cut to the prompt's own keys (the adopted layers hold just those)."""
    if isinstance(mask, dict):
        return {name: prompt_mask(value, prompt_len) for name, value in mask.items()}
    if mask is None or mask.dim() != 4:
        return mask
    return mask[..., :prompt_len].contiguous()


def layer_mask(kwargs: dict, layer_idx: int, attn_implementation: str):
    """The attention mask for decoder layer ``layer_idx`` while it continues a frozen pruned static cache:
    HF's full-length mask gathered to the layer's slots. ``None`` if the layer's cache is not one."""
    cache = find_cache(kwargs)
    if not is_frozen(cache):
        return None
    layer = cache.layers[layer_idx]
    if layer.slots is None:
        return None
    mask = kwargs.get("attention_mask")
    if mask is None:  # HF always builds a mask over a compileable cache's length when it continues one
        raise RuntimeError(
            f"kvprune: decoder layer {layer_idx} continues a pruned static cache but received no attention "
            "mask; call the model with an attention_mask (generate does), or use the dynamic cache."
        )
    return restrict_mask(
        mask, cols=layer.slots, rows=None, query_index=None, attn_implementation=attn_implementation, dtype=mask.dtype
    )


def check_room(cache, new_tokens: int) -> None:
    """Refuse a later turn that does not fit the room a frozen pruned static cache has left. Read once
    per turn, never in a decoding step (that would wait for the device every token); writing past a
    static buffer would otherwise fail with an indexing error or, on a GPU, a device-side assertion."""
    first = cache.layers[0]
    held = int(first.get_seq_length())
    if held + new_tokens > first.max_cache_len:
        raise ValueError(
            f"this call adds {new_tokens} tokens to a pruned static cache that has room for "
            f"{first.max_cache_len - held} more: a static cache holds max_cache_len tokens in all, and "
            "cache_implementation='static' sizes it for one call (prompt + max_new_tokens). For later turns, pass "
            "past_key_values=StaticCache(config=model.config, max_cache_len=...) large enough for every turn, "
            "or use the default dynamic cache."
        )
