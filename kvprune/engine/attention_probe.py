"""See what one attention layer computed, under any attention backend, without eager attention.

A layer's attention module is pointed at a recording attention function (registered once with
``AttentionInterface``) that calls the backend the model was loaded with and keeps what pruning
needs: the post-RoPE keys and the softmax row of the last query (token-dropping presses at layer
K-1), or the post-RoPE queries of the last prompt positions (cache presses, at every layer they
compress). Only the recorded modules are touched: their ``config`` is swapped for a view that names
the recorder, so masks, other layers and the audio encoder keep their own backend. The full
attention matrix is never built.
"""

from __future__ import annotations

import sys
from typing import Callable

import torch
import torch.nn as nn
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

RECORDER_NAME = "kvprune_recorder"
RECORDER_ATTRIBUTE = "_kvprune_recorder"  # the attention module's attribute holding its recorder while attached
#: ``query_rows`` that records every query of the prompt
ALL_QUERIES = sys.maxsize


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
    """Records what one attention module computed during the next call while ``armed``.

    ``attention_row``: the last query's head-averaged attention over all keys; ``keys``: the post-RoPE
    keys; ``query_rows``: how many of the last post-RoPE queries to keep (0: none; ``ALL_QUERIES``:
    every one). Queries are only referenced, not copied: the layer computed them anyway.
    """

    def __init__(self, attention: nn.Module, *, attention_row: bool = False, keys: bool = False, query_rows: int = 0):
        self.attention = attention
        self.want_attention = attention_row
        self.want_keys = keys
        self.query_rows = query_rows
        self.armed = False
        self.attention_row: torch.Tensor | None = None
        self.keys: torch.Tensor | None = None
        self.queries: torch.Tensor | None = None  # (B, heads, rows, head_dim)
        self.scaling: float | None = None
        self._original_config = None
        self._backend: Callable | None = None

    def attach(self) -> None:
        _register_recorder()
        config = self.attention.config
        self._backend = attention_backend(self.attention, config._attn_implementation)
        self._original_config = config
        self.attention.config = _ConfigView(config, RECORDER_NAME)
        setattr(self.attention, RECORDER_ATTRIBUTE, self)

    def detach(self) -> None:
        if self._original_config is not None:
            self.attention.config = self._original_config
            self._original_config = None
        self.attention.__dict__.pop(RECORDER_ATTRIBUTE, None)
        self.clear()

    def clear(self) -> None:
        self.armed = False
        self.attention_row = None
        self.keys = None
        self.queries = None

    def take_queries(self) -> tuple[torch.Tensor | None, float | None]:
        """The recorded queries and the attention scaling, forgetting the queries."""
        queries, self.queries = self.queries, None
        return queries, self.scaling

    def __call__(self, module, query, key, value, attention_mask, **kwargs):
        output = self._backend(module, query, key, value, attention_mask, **kwargs)
        if self.armed:
            scaling = kwargs.get("scaling")
            self.scaling = getattr(module, "scaling", query.shape[-1] ** -0.5) if scaling is None else scaling
            if self.want_keys:
                self.keys = key
            if self.want_attention:
                self.attention_row = last_query_attention(query, key, attention_mask, self.scaling)
            if self.query_rows:
                self.queries = query[:, :, -min(self.query_rows, query.shape[2]) :]
            self.armed = False
        return output


def _recording_attention(module, query, key, value, attention_mask, **kwargs):
    return getattr(module, RECORDER_ATTRIBUTE)(module, query, key, value, attention_mask, **kwargs)


def _register_recorder() -> None:
    if RECORDER_NAME not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(RECORDER_NAME, _recording_attention)
