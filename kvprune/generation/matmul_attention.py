"""Decode attention as plain PyTorch: what the fused kernels of ``decode_attention`` compute, and what runs where
they do not (no Triton, off CUDA, shapes they do not take); a compiled step on the CPU fuses it with its neighbours."""

from __future__ import annotations

import torch


def matmul_attention(query, key, value, mask, scaling: float) -> torch.Tensor:
    """(B, heads, 1, D) queries against (B, kv_heads, C, D) keys and values with a (B, 1 | heads, 1, C)
    boolean mask; returns (B, 1, heads, D) as the stock attention functions do. Two small matrix
    products and a softmax in float32, with the query heads that share a key-value head stacked, so that
    no key or value is copied per head (sdpa with a mask repeats them for grouped-query attention)."""
    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scores = torch.matmul(query.view(batch, kv_heads, groups, dim), key.transpose(-1, -2)).float() * scaling
    mask = mask.view(batch, kv_heads, groups, length) if mask.shape[1] == heads else mask.view(batch, 1, 1, length)
    probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1).to(value.dtype)
    output = torch.matmul(probs, value)  # (B, kv_heads, groups, D)
    return output.view(batch, heads, 1, dim).transpose(1, 2).contiguous()
