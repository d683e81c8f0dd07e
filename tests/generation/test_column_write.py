"""The decode step's cache write (``kvprune::write_column``) against a row-by-row reference: each row's new key and
value at its own column, nothing else touched, bit for bit.

The Triton kernel runs on CUDA, or on the CPU in Triton's interpreter (``TRITON_INTERPRET=1`` set before Python
starts; ``test_kernels_interpreted.py`` runs this file so in CI); elsewhere the operator's ``scatter_`` form is
what is tested."""

from __future__ import annotations

import os

import pytest
import torch

from kvprune.generation import column_write

needs_kernel = pytest.mark.skipif(
    column_write.triton is None or not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"),
    reason="the Triton kernel needs Triton and CUDA, or TRITON_INTERPRET=1 set before Python starts",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _case(batch=3, heads=2, slots=10, dim_k=8, dim_v=8, dtype=torch.float32, columns=(0, 9, 4), seed=0):
    """Caches, one column per row, and new entries laid out as a model makes them: (batch, 1, heads, dim)
    projections transposed to (batch, heads, 1, dim)."""
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(batch, heads, slots, dim_k, generator=generator).to(dtype)
    values = torch.randn(batch, heads, slots, dim_v, generator=generator).to(dtype)
    new_keys = torch.randn(batch, 1, heads, dim_k, generator=generator).to(dtype).transpose(1, 2)
    new_values = torch.randn(batch, 1, heads, dim_v, generator=generator).to(dtype).transpose(1, 2)
    tensors = keys, values, torch.tensor(columns, dtype=torch.long), new_keys, new_values
    return [t.to(DEVICE) for t in tensors]


def _reference(keys, values, columns, new_keys, new_values):
    """Row by row, written out: what the write must leave."""
    keys, values = keys.clone(), values.clone()
    for row, column in enumerate(columns.tolist()):
        if 0 <= column < keys.shape[2]:
            keys[row, :, column] = new_keys[row, :, 0]
            values[row, :, column] = new_values[row, :, 0]
    return keys, values


def test_the_operator_writes_each_row_at_its_own_column_and_nothing_else():
    keys, values, columns, new_keys, new_values = _case()
    expected = _reference(keys, values, columns, new_keys, new_values)
    torch.ops.kvprune.write_column(keys, values, columns, new_keys, new_values)
    assert torch.equal(keys, expected[0]) and torch.equal(values, expected[1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the operator takes the kernel, which skips such a column")
def test_off_cuda_a_column_outside_the_cache_raises():
    keys, values, columns, new_keys, new_values = _case(columns=(10, 0, 3))  # 10 slots
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.ops.kvprune.write_column(keys, values, columns, new_keys, new_values)


def test_the_kernel_is_taken_only_on_cuda_for_one_entry_per_row_and_head():
    keys, values, columns, new_keys, new_values = [t.cpu() for t in _case()]
    assert not column_write.kernel_fits(keys, values, columns, new_keys, new_values)  # the CPU: scatter_


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dims", [(8, 8), (24, 12)], ids=["equal", "uneven"])  # 24, 12: not powers of two
def test_the_kernel_equals_the_reference_bit_for_bit(dtype, dims):
    keys, values, columns, new_keys, new_values = _case(batch=4, heads=3, slots=33, dim_k=dims[0], dim_v=dims[1],
                                                        dtype=dtype, columns=(0, 32, 7, 7))
    expected = _reference(keys, values, columns, new_keys, new_values)
    column_write.launch(keys, values, columns, new_keys, new_values)
    assert torch.equal(keys, expected[0]) and torch.equal(values, expected[1])


@needs_kernel
def test_a_column_outside_the_cache_writes_nothing():
    keys, values, columns, new_keys, new_values = _case(columns=(10, -1, 3))  # 10 slots: columns 10 and -1 are outside
    before = keys.clone(), values.clone()
    column_write.launch(keys, values, columns, new_keys, new_values)
    assert torch.equal(keys[:2], before[0][:2]) and torch.equal(values[:2], before[1][:2])
    assert torch.equal(keys[2, :, 3], new_keys[2, :, 0]) and torch.equal(values[2, :, 3], new_values[2, :, 0])
