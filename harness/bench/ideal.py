"""The ideal of token dropping: what a prefill would cost if removing tokens before layer K were free.

The ideal at ratio r is a real request of the real model on the real inputs (encoder, embedding,
merge, layers < K on the full prompt, exactly as the unpruned prefill runs them) whose decoder layers
>= K and LM head run on the prompt's first ``keep`` positions, ``keep`` being the length a press at r
leaves. It is made as the presses' prefills are: beside presses on kvprune's engine, the engine's prefill
call alone (``kvprune.generation.prefill``: its position ids, its inputs, the head on the last position);
beside presses on the forward path, the model's forward. Taking a prefix costs nothing: the hidden states, rotary embeddings, position ids and mask
are sliced as views, so there is no scoring, no gather and no mask to rebuild. Every press at r runs
the same code plus its own work, so no press can be faster than its ideal beyond noise; the bench
flags a row that is.

Earlier versions assembled the ideal from parts, ``unpruned prefill - layers >= K alone on the full
prompt + layers >= K alone on the kept prompt``, timed on random embeddings from an idle device.
That is not a bound: the same layers run slower inside a long prefill (after the audio encoder has
heated the card and dropped its clocks) than alone from idle, so the subtraction took too little
away and the "ideal" came out above what presses reached (on the Aero-1 stand-in, whose Whisper
encoder runs near the card's peak, every press measured 0.875-0.956x of it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

from kvprune.models import resolve_family
from kvprune.models.layer_io import by_name


@contextmanager
def kept_prefix(model: nn.Module, layer: int, keep: int) -> Iterator[None]:
    """While inside, the prefill's decoder layers from ``layer`` on (and so the final norm, the LM
    head and their cache) see only the first ``keep`` prompt positions. Calls of ``keep`` tokens or
    fewer (decoding steps) are left alone."""
    family = resolve_family(model)
    layers, io = family.layers(model), family.structure.layer_io

    def hook(module, args, kwargs):
        args, kwargs = by_name(module, args, kwargs)
        hidden = args[0] if args else kwargs["hidden_states"]
        if hidden.shape[io.hidden_axis] > keep:  # only layer K's input is longer; later layers get it already cut
            hidden = hidden.narrow(io.hidden_axis, 0, keep)
        if args:
            args = (hidden, *args[1:])
        else:
            kwargs["hidden_states"] = hidden
        for name, cut in _CUTS.items():
            if kwargs.get(name) is not None:
                kwargs[name] = _apply(cut, kwargs[name], keep)
        for name in io.token_args:  # the family's other per-token inputs (sequence axis 1)
            if kwargs.get(name) is not None:
                kwargs[name] = kwargs[name][:, :keep]
        return args, kwargs

    handles = [layers[j].register_forward_pre_hook(hook, with_kwargs=True) for j in range(layer, len(layers))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _mask(mask: torch.Tensor, keep: int) -> torch.Tensor:
    """A 4-D mask (B, 1, S, S) loses rows and columns; a 2-D padding mask (B, S) columns."""
    return mask[..., :keep, :keep] if mask.dim() == 4 else mask[..., :keep]


#: how each decoder layer argument is cut to the first ``keep`` positions
_CUTS = {
    "position_embeddings": lambda t, keep: t[..., :keep, :],  # cos and sin, (..., S, d)
    "position_ids": lambda t, keep: t[..., :keep],  # (B, S), or (3, B, S) for multimodal RoPE
    "cache_position": lambda t, keep: t[..., :keep],  # (S,), in transformers versions that pass it
    "attention_mask": _mask,
}


def _apply(cut, value, keep: int):
    if isinstance(value, tuple):
        return tuple(_apply(cut, v, keep) for v in value)
    if isinstance(value, dict):  # masks per attention type
        return {name: _apply(cut, v, keep) for name, v in value.items()}
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"the ideal cannot cut a decoder layer argument of type {type(value).__name__} to a prefix")
    return cut(value, keep)
