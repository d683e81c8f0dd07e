"""The decode step's cache write: each row's new key and value at its own column of the layer's cache, in place,
where the attention's kernel does not store them itself (``decode_attention.write_and_attend``: the fused kernels
on CUDA); so on the matmul path, under eager attention, and off CUDA.

``write_column`` is an operator that declares what it mutates, so that a compiled step writes into the cache
where it lies: written as a ``scatter_`` in the step, the compiler made a new copy of every layer's whole cache
per token for the attention to read (3x the cache's bytes per step: at batch 64 and 5 min of audio, most of the
step).

On CUDA with Triton one kernel writes both tensors (a program per row and head, launched as a dependent where
``dependent_launch`` says so); elsewhere two ``scatter_`` calls do. As two ATen scatter kernels the writes took
251 us of the 7B's 8.47 ms step at 64 rows (56 launches a step; H100, 2026-11-27); the one kernel took FastV 0.9's
64-row step from 8.45 to 8.17 ms and its one-row step from 5.49 to 5.35 (H100, 2026-12-06, tokens bit-identical).
"""

from __future__ import annotations

import torch

from .dependent_launch import launch_options
from .triton_support import tl, triton


if triton is not None:

    @triton.jit
    def _write_kernel(keys, values, columns, new_keys, new_values, HEADS, LENGTH,
                      k_b, k_h, k_s, k_d, v_b, v_h, v_s, v_d, nk_b, nk_h, nk_d, nv_b, nv_h, nv_d,
                      DIM_K: tl.constexpr, DIM_V: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
                      PDL: tl.constexpr = False):
        """Row ``pid // HEADS``, head ``pid % HEADS``: its new key and value at the row's column (a column outside
        the cache writes nothing)."""
        if PDL:  # a dependent launch: the new keys and values are the kernel before's output
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        pid = tl.program_id(0)
        row, head = pid // HEADS, pid % HEADS
        column = tl.load(columns + row)
        written = tl.where((column >= 0) & (column < LENGTH), 1, 0)  # a scalar: 0 masks every element out
        dk = tl.arange(0, BLOCK_K)
        key = tl.load(new_keys + row * nk_b + head * nk_h + dk * nk_d, mask=dk < DIM_K)
        tl.store(keys + row.to(tl.int64) * k_b + head * k_h + column * k_s + dk * k_d, key,
                 mask=dk < DIM_K * written)
        dv = tl.arange(0, BLOCK_V)
        value = tl.load(new_values + row * nv_b + head * nv_h + dv * nv_d, mask=dv < DIM_V)
        tl.store(values + row.to(tl.int64) * v_b + head * v_h + column * v_s + dv * v_d, value,
                 mask=dv < DIM_V * written)


def kernel_fits(keys: torch.Tensor, values: torch.Tensor, columns: torch.Tensor, key_states: torch.Tensor,
                value_states: torch.Tensor) -> bool:
    """Whether ``launch`` takes these tensors: CUDA and Triton, all on one device, one new entry per row and head,
    one column per row."""
    batch, heads = keys.shape[:2]
    on_one_device = all(t.device == keys.device for t in (values, columns, key_states, value_states))
    return (
        triton is not None and keys.is_cuda and on_one_device and keys.dim() == values.dim() == 4
        and key_states.shape == (batch, heads, 1, keys.shape[-1]) and value_states.shape == (batch, heads, 1, values.shape[-1])
        and values.shape[:3] == keys.shape[:3] and key_states.dtype == keys.dtype and value_states.dtype == values.dtype
        and columns.numel() == batch and columns.dtype == torch.long
    )


def launch(keys: torch.Tensor, values: torch.Tensor, columns: torch.Tensor, key_states: torch.Tensor,
           value_states: torch.Tensor) -> None:
    """``write_column`` in one Triton kernel (tensors that ``kernel_fits``, or any device in Triton's interpreter)."""
    batch, heads, length = keys.shape[:3]
    dim_k, dim_v = keys.shape[-1], values.shape[-1]
    pdl = launch_options(keys.device)
    _write_kernel[(batch * heads,)](
        keys, values, columns, key_states, value_states, heads, length, *keys.stride(), *values.stride(),
        key_states.stride(0), key_states.stride(1), key_states.stride(3),
        value_states.stride(0), value_states.stride(1), value_states.stride(3),
        DIM_K=dim_k, DIM_V=dim_v, BLOCK_K=triton.next_power_of_2(dim_k), BLOCK_V=triton.next_power_of_2(dim_v),
        num_warps=1, **pdl,
    )


@torch.library.custom_op("kvprune::write_column", mutates_args=("keys", "values"))
def write_column(keys: torch.Tensor, values: torch.Tensor, columns: torch.Tensor, key_states: torch.Tensor,
                 value_states: torch.Tensor) -> None:
    """Row ``b``'s new key and value (``key_states[b]``, ``value_states[b]``: one entry per head) at column
    ``columns[b]`` of ``keys`` and ``values`` (batch, heads, slots, dim), in place. The decode state leaves room
    for every token it decodes; a column outside the cache is not written by the kernel (``scatter_`` raises)."""
    if kernel_fits(keys, values, columns, key_states, value_states):
        launch(keys, values, columns, key_states, value_states)
        return
    index = columns.view(-1, 1, 1, 1)
    keys.scatter_(2, index.expand(-1, key_states.shape[1], 1, key_states.shape[-1]), key_states)
    values.scatter_(2, index.expand(-1, value_states.shape[1], 1, value_states.shape[-1]), value_states)


@write_column.register_fake
def _(keys, values, columns, key_states, value_states) -> None:
    return None
