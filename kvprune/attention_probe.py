"""See what one attention layer computed, under any attention backend, without eager attention.

The layer's attention module is pointed at a recording attention function (registered once with
``AttentionInterface``) that calls the backend the model was loaded with and keeps what pruning
needs: the post-RoPE keys and the softmax row of the last query. Only that one module is touched:
its ``config`` is swapped for a view that names the recorder, so masks, other layers and the audio
encoder keep their own backend. The full attention matrix is never built.
"""

from __future__ import annotations

import sys
from typing import Callable

import torch
import torch.nn as nn
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

RECORDER_NAME = "kvprune_recorder"


class _ConfigView:
    """The attention module's config, except for the attention implementation it dispatches to."""

    def __init__(self, base, attn_implementation: str):
        self.__dict__["_base"] = base
        self.__dict__["_attn_implementation"] = attn_implementation

    def __getattr__(self, name):
        return getattr(self.__dict__["_base"], name)


def attention_backend(module: nn.Module, name: str) -> Callable:
    """The attention function ``module`` dispatches to under implementation ``name``."""
    if name in ALL_ATTENTION_FUNCTIONS:
        return ALL_ATTENTION_FUNCTIONS[name]
    if name == "eager":
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is not None:
            return eager
    raise NotImplementedError(
        f"kvprune cannot wrap attention implementation {name!r} of {type(module).__name__}; "
        "load the model with attn_implementation='sdpa', 'eager' or 'flash_attention_2'."
    )


def key_validity(mask: torch.Tensor | None, batch: int, kv_len: int, device) -> torch.Tensor:
    """Which keys the last query may see, from a mask in any of the formats HF passes to layers."""
    if mask is None:
        return torch.ones(batch, kv_len, dtype=torch.bool, device=device)
    if mask.dim() == 2:  # flash attention: (B, kv) padding mask
        valid = mask.bool()
    elif mask.dtype == torch.bool:  # sdpa: (B|1, 1|H, q, kv)
        valid = mask[:, 0, -1, :]
    else:  # eager: additive float mask
        valid = mask[:, 0, -1, :] > torch.finfo(mask.dtype).min / 2
    return valid.expand(batch, kv_len)


def last_query_attention(query, key, mask, scaling: float) -> torch.Tensor:
    """Head-averaged softmax attention of the last query over all keys: (B, kv), in float32."""
    batch, n_heads, _, head_dim = query.shape
    n_kv = key.shape[1]
    q = query[:, :, -1, :].float().view(batch, n_kv, n_heads // n_kv, head_dim)
    logits = torch.einsum("bkgd,bksd->bkgs", q, key.float()) * scaling
    valid = key_validity(mask, batch, key.shape[2], key.device)
    logits = logits.masked_fill(~valid[:, None, None, :], float("-inf"))
    return logits.softmax(dim=-1).mean(dim=(1, 2))


class AttentionRecorder:
    """Records one attention module's keys and last-query attention while ``armed``."""

    def __init__(self, attention: nn.Module, want_attention: bool, want_keys: bool):
        self.attention = attention
        self.want_attention = want_attention
        self.want_keys = want_keys
        self.armed = False
        self.attention_row: torch.Tensor | None = None
        self.keys: torch.Tensor | None = None
        self._original_config = None
        self._backend: Callable | None = None

    def attach(self) -> None:
        _register_recorder()
        config = self.attention.config
        self._backend = attention_backend(self.attention, config._attn_implementation)
        self._original_config = config
        self.attention.config = _ConfigView(config, RECORDER_NAME)
        self.attention._kvprune_recorder = self

    def detach(self) -> None:
        if self._original_config is not None:
            self.attention.config = self._original_config
            self._original_config = None
        self.attention.__dict__.pop("_kvprune_recorder", None)
        self.clear()

    def clear(self) -> None:
        self.armed = False
        self.attention_row = None
        self.keys = None

    def __call__(self, module, query, key, value, attention_mask, **kwargs):
        output = self._backend(module, query, key, value, attention_mask, **kwargs)
        if self.armed:
            if self.want_keys:
                self.keys = key
            if self.want_attention:
                scaling = kwargs.get("scaling")
                if scaling is None:
                    scaling = getattr(module, "scaling", query.shape[-1] ** -0.5)
                self.attention_row = last_query_attention(query, key, attention_mask, scaling)
            self.armed = False
        return output


def _recording_attention(module, query, key, value, attention_mask, **kwargs):
    return module._kvprune_recorder(module, query, key, value, attention_mask, **kwargs)


def _register_recorder() -> None:
    if RECORDER_NAME not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(RECORDER_NAME, _recording_attention)
