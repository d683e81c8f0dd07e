"""The fused decode attention (kvprune::decode_attention) against an independent float64 reference.

The Triton kernels run on CUDA, or on the CPU in Triton's interpreter: ``TRITON_INTERPRET=1`` set
before Python starts (Triton reads it when it is imported), e.g.
``TRITON_INTERPRET=1 python -m pytest -q tests/generation/test_decode_attention.py``. Without Triton (CI: the CPU
build of torch has none), or on the CPU without the interpreter, those tests are skipped; the split
sizes, the fake implementation and the fallback are tested everywhere. Where Triton is installed (and
the interpreter is off), the kernels are also compiled for an H100 (no GPU needed).

Tolerances (largest |error| of each (row, head) output over its largest |reference| value): float32
1e-5; float16 2e-3; bfloat16 2e-2 in the interpreter, which truncates float32 to bfloat16 where the GPU
rounds to nearest (up to 1.07e-2 measured over 12 seeds; PyTorch's matmul path: 1.04e-2), 1e-2 on CUDA.
"""

from __future__ import annotations

import io
import math
import os

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kvprune.generation import decode_attention as fused
from kvprune.generation.attention import decode_attention
from tests.support.paths import load_script
from tests.support.triton_kernels import H100_SHARED_BYTES, compile_for_h100

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
H100_PROCESSORS = fused.H100_PROCESSORS

needs_kernels = pytest.mark.skipif(
    fused.triton is None or not (CUDA or os.environ.get("TRITON_INTERPRET") == "1"),
    reason="the Triton kernels need Triton and CUDA, or TRITON_INTERPRET=1 set before Python starts to run "
    "them on the CPU (Triton reads it at import)",
)
needs_interpreter = pytest.mark.skipif(
    fused.triton is None or os.environ.get("TRITON_INTERPRET") != "1",
    reason="the check script's CPU form runs the Triton kernels in Triton's interpreter: TRITON_INTERPRET=1",
)
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2 if CUDA else 2e-2}


def _check_script():
    return load_script("check_decode_attention")


CHECK = _check_script()
reference, relative_error = CHECK.reference_attention, CHECK.relative_error  # float64, independent of the kernel


def inputs(batch, heads, kv_heads, length, dim, per_head, dtype, seed=0, transposed_query=True):
    """Random queries (as a model makes them: (B, 1, heads, D) transposed, unless not ``transposed_query``),
    keys, values and a mask: random holes, the last fifth of the slots never visible (a bucket's filler),
    row 0 sees one slot only, and with a mask per head and several rows, head 1 of the last row sees one
    other slot."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, 1, heads, dim, generator=generator)
    query = query.transpose(1, 2) if transposed_query else query.view(batch, heads, 1, dim)
    key, value = (torch.randn(batch, kv_heads, length, dim, generator=generator) for _ in range(2))
    mask = torch.rand(batch, heads if per_head else 1, 1, length, generator=generator) > 0.5
    mask[..., length - length // 5 :] = False
    mask[0] = False
    mask[0, ..., 3] = True
    if per_head and batch > 1:
        mask[-1, 1] = False
        mask[-1, 1, 0, length - length // 5 - 1] = True
    return [t.to(DEVICE, dtype) for t in (query, key, value)] + [mask.to(DEVICE)]


def test_split_sizes_fills_the_device_with_whole_tiles():
    for batch, kv_heads, length in [(1, 4, 7700), (1, 4, 900), (16, 4, 7700), (16, 4, 900), (1, 4, 40), (64, 32, 7700)]:
        splits, chunk = fused.split_sizes(batch, kv_heads, length, H100_PROCESSORS)
        aim = fused.split_aim(batch, kv_heads, H100_PROCESSORS)
        block = fused.default_block(batch, kv_heads, H100_PROCESSORS)
        assert chunk % block == 0 and (splits - 1) * chunk < length <= splits * chunk  # no empty split
        assert splits <= aim  # and one tile fewer per split would overshoot the aim:
        assert chunk == block or -(-length // (chunk - block)) > aim
    assert fused.split_sizes(1, 4, 7700, H100_PROCESSORS)[0] * 4 >= H100_PROCESSORS  # one row fills an H100
    assert fused.split_sizes(1, 4, 900, H100_PROCESSORS) == (15, 64)  # 15 tiles: one each
    assert fused.split_sizes(64, 32, 7700, H100_PROCESSORS) == (1, 7808)  # 2048 programs already: no split, wide tiles


def test_split_aim_fills_the_places_of_one_wave_and_no_more():
    """The programs of every split all run at once (two per multiprocessor), as many as fit: a second, partial wave
    would trail the first (16 rows x 4 key-value heads: 4 splits, 256 programs on 264 places, not 5 and 320)."""
    places = fused.PROGRAMS_PER_PROCESSOR * H100_PROCESSORS
    for batch in (1, 2, 3, 4, 8, 16, 17, 32, 33, 64, 65, 128, 743):
        aim = fused.split_aim(batch, 4, H100_PROCESSORS)
        assert 1 <= aim <= fused.MAX_SPLITS
        assert batch * 4 * aim <= places or aim == 1  # one wave, unless the rows alone take more
        assert batch * 4 * (aim + 1) > places or aim == fused.MAX_SPLITS  # and one split more would not fit
    assert [fused.split_aim(b, 4, H100_PROCESSORS) for b in (1, 2, 4, 8, 16, 32, 64, 128)] == [64, 33, 16, 8, 4, 2, 1, 1]


def test_beyond_one_wave_splits_shrink_a_nearly_empty_last_wave():
    """132 rows x 4 key-value heads fill two waves of an H100's 264 places exactly; 139 rows leave 28 programs in a
    third (read 1.33x slower, not 1.05x) and split, as far as splitting saves a tenth of the waves per unit of work;
    batches whose last wave is full enough (242, 264, 743, 784 rows: measured fastest unsplit) keep one split."""
    places = fused.PROGRAMS_PER_PROCESSOR * H100_PROCESSORS
    assert [fused.split_aim(b, 4, H100_PROCESSORS) for b in (128, 132, 242, 264, 743, 784)] == [1] * 6
    assert fused.split_aim(139, 4, H100_PROCESSORS) > 1 and fused.split_aim(146, 4, H100_PROCESSORS) > 1
    for batch in range(67, 1200):
        programs, aim = batch * 4, fused.split_aim(batch, 4, H100_PROCESSORS)
        assert 1 <= aim <= fused.TAIL_SPLITS
        one_split = math.ceil(programs / places)
        if aim > 1:  # it pays: at least a tenth fewer waves per unit of work than one split
            assert math.ceil(programs * aim / places) / aim <= 0.9 * one_split



def test_beyond_one_wave_a_split_keeps_at_least_its_floor_of_tiles():
    """Splitting a short cache beyond one wave cost more than it saved (FastV's layers >= K, ~1,000 slots, at 139 rows):
    there each split keeps ``TAIL_MIN_TILES`` tiles, so a 1,024-slot cache stays whole and a 7,700-slot one splits;
    within one wave a split keeps one tile at least, as before."""
    assert fused.split_floor(139, 4, H100_PROCESSORS) == fused.TAIL_MIN_TILES
    assert fused.split_floor(66, 4, H100_PROCESSORS) == 1  # 264 programs: one wave exactly
    assert fused.split_sizes(139, 4, 1024, H100_PROCESSORS)[0] == 1
    assert fused.split_aim(139, 4, H100_PROCESSORS) == 6  # but 7,700 slots are 61 wide tiles: 3 splits of 16 or more
    assert fused.split_sizes(139, 4, 7700, H100_PROCESSORS) == (3, 21 * fused.WIDE_BLOCK)
    assert fused.split_sizes(16, 4, 1024, H100_PROCESSORS)[0] == 4  # within one wave: 4 splits of 4 tiles
    for tiles in range(1, 200):
        splits = fused.splits_of(tiles, 6, fused.TAIL_MIN_TILES)
        assert splits == 1 or tiles // splits >= fused.TAIL_MIN_TILES


def test_wide_tiles_beyond_one_wave_only():
    """Beyond one wave a program reads a whole row's cache, and 128-slot tiles read FastV's short caches faster at 818
    and 1,344 rows; within one wave (splits of few tiles) the 64-slot tiles stay, and so do the splits' sizes."""
    assert fused.default_block(66, 4, H100_PROCESSORS) == fused.BLOCK == 64  # 264 programs: one wave exactly
    assert fused.default_block(67, 4, H100_PROCESSORS) == fused.default_block(818, 4, H100_PROCESSORS) == 128
    assert fused.split_sizes(818, 4, 842, H100_PROCESSORS) == (1, 896)  # 7 tiles of 128 slots, unsplit
    assert fused.split_sizes(16, 4, 1024, H100_PROCESSORS) == (4, 256)  # within one wave: as before
    query = torch.empty(818, 28, 1, 128, dtype=torch.bfloat16)  # a 128-slot bf16 tile holds two stages
    assert fused.default_stages(query, fused.default_block(818, 4, H100_PROCESSORS)) == fused.STAGES


def test_three_stages_where_the_tiles_are_small_enough():
    """Two programs of three stages of bf16 or fp16 key and value tiles (head dim up to 128) share an H100's
    multiprocessor; larger tiles (fp32, or head dim 256) keep two stages."""
    bf16_tile = fused.BLOCK * 128 * 2
    assert fused.pipeline_stages(bf16_tile) == fused.pipeline_stages(fused.BLOCK * 64 * 2) == 3
    assert fused.pipeline_stages(2 * bf16_tile) == 2


def test_launch_defaults_are_the_module_values_at_the_call(monkeypatch):
    """``scripts/ab_decode_step.py`` times variants by setting module attributes: a default bound when the module
    was imported would time the old value under the new name."""
    query = torch.empty(2, 28, 1, 128, dtype=torch.bfloat16)
    before = fused.split_sizes(64, 4, 900, H100_PROCESSORS), fused.default_stages(query)
    monkeypatch.setattr(fused, "BLOCK", 2 * fused.BLOCK)
    assert fused.split_sizes(64, 4, 900, H100_PROCESSORS) == fused.split_sizes(64, 4, 900, H100_PROCESSORS, fused.BLOCK)
    wide = fused.BLOCK
    assert before[0] == (1, 960) and fused.split_sizes(64, 4, 900, H100_PROCESSORS) == (1, -(-900 // wide) * wide)  # 1024
    assert fused.default_stages(query) == fused.STAGES < before[1]  # the wider tile no longer fits three stages


def test_fake_implementation_gives_the_output_shape():
    with FakeTensorMode():
        query = torch.empty(2, 28, 1, 128, dtype=torch.bfloat16)
        key = value = torch.empty(2, 4, 900, 128, dtype=torch.bfloat16)
        output = fused.fused_decode_attention(query, key, value, torch.empty(2, 28, 1, 900, dtype=torch.bool), 0.1)
    assert output.shape == (2, 1, 28, 128) and output.dtype == torch.bfloat16


def test_operator_schema_and_fake_agree_with_the_fallback():
    query, key, value, mask = (t.cpu() for t in inputs(2, 6, 2, 20, 16, True, torch.float32))
    torch.library.opcheck(fused.fused_decode_attention, (query, key, value, mask, 0.25))


@pytest.mark.parametrize("per_head", [False, True])
def test_off_cuda_the_operator_and_the_dispatch_compute_the_matmul_path(per_head):
    query, key, value, mask = (t.cpu() for t in inputs(2, 6, 2, 20, 16, per_head, torch.float32))
    expected = fused.matmul_attention(query, key, value, mask, 16**-0.5)
    assert torch.equal(fused.fused_decode_attention(query, key, value, mask, 16**-0.5), expected)
    if not CUDA:
        assert torch.equal(decode_attention(query, key, value, mask), expected)


CASES = {  # batch, heads, kv_heads, length, dim, per_head, chunk (slots per split; None: split_sizes's)
    "groups1-one-split": (2, 4, 4, 100, 64, False, 128),
    "groups2-per-head-3-splits": (2, 4, 2, 150, 128, True, 64),
    "groups7-per-row-5-splits": (1, 14, 2, 300, 128, False, 64),
    "groups7-per-head-3-splits": (2, 14, 2, 300, 64, True, 128),
    "groups7-default-splits": (1, 14, 2, 1000, 64, True, None),
}


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_kernel_equals_float64_attention(case, dtype):
    batch, heads, kv_heads, length, dim, per_head, chunk = case
    query, key, value, mask = inputs(batch, heads, kv_heads, length, dim, per_head, dtype, transposed_query=dim == 64)
    output = fused.flash_decode(query, key, value, mask, dim**-0.5, chunk=chunk)
    assert output.shape == (batch, 1, heads, dim) and output.dtype == dtype and output.is_contiguous()
    assert relative_error(output, reference(query, key, value, mask, dim**-0.5)) <= TOLERANCE[dtype]
    groups = heads // kv_heads
    assert torch.equal(output[0, 0], value[0, :, 3].repeat_interleave(groups, dim=0))  # row 0 sees slot 3 only
    if per_head and batch > 1:
        assert torch.equal(output[-1, 0, 1], value[-1, 1 // groups, length - length // 5 - 1])


@needs_kernels
def test_operator_runs_the_kernel_where_it_fits(monkeypatch):
    if not CUDA:  # the interpreter takes CPU tensors, which the operator otherwise leaves to the matmul path
        monkeypatch.setattr(fused, "kernel_fits", lambda *tensors: True)
    launches, flash_decode = [], fused.flash_decode

    def counted(*args, **kwargs):
        launches.append(args)
        return flash_decode(*args, **kwargs)

    monkeypatch.setattr(fused, "flash_decode", counted)
    query, key, value, mask = inputs(2, 14, 2, 200, 64, True, torch.bfloat16)
    output = fused.fused_decode_attention(query, key, value, mask, 0.125)
    assert len(launches) == 1
    assert relative_error(output, reference(query, key, value, mask, 0.125)) <= TOLERANCE[torch.bfloat16]


@needs_kernels
def test_a_row_that_sees_nothing_is_nan_as_in_the_matmul_path():
    query, key, value, mask = inputs(2, 4, 2, 130, 16, False, torch.float32)
    mask[1] = False
    output = fused.flash_decode(query, key, value, mask, 0.25, chunk=64)
    expected = fused.matmul_attention(query, key, value, mask, 0.25)
    assert output[1].isnan().all() and expected[1].isnan().all()
    torch.testing.assert_close(output[0], expected[0])


@needs_interpreter
def test_the_gpu_check_runs_on_the_cpu():
    out = io.StringIO()
    assert CHECK.main(["--tiny", "--no-sweep"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert sum("FAILS" in line for line in lines) == 0 and lines[-1].startswith("ok")
    assert sum(line.endswith(" x 64") for line in lines) == 10  # every accuracy case ran, with splits


@needs_interpreter
def test_the_gpu_check_takes_the_batches_and_lengths_it_is_given():
    out = io.StringIO()  # 3 rows: more than the tiny setup's 2 reference rows, so the kernel's first 2 are compared
    assert CHECK.main(["--tiny", "--no-sweep", "--batches", "3", "--lengths", "150"], out=out) == 0
    accuracy = [line.split() for line in out.getvalue().splitlines() if line.endswith((" x 64", " x 128"))]
    assert accuracy and {(row[0], row[1]) for row in accuracy} == {("3", "150")}
    assert "its first 2)" in out.getvalue()


def test_the_gpu_check_holds_as_many_input_sets_as_its_memory_affords():
    """A set of 2 rows x 100 slots at the tiny shape: keys and values 2 x 2 x 2 heads x 100 x 64 x 2 bytes =
    102,400, its mask at most 2 x 100 x (14 heads + 1) = 3,000 bytes."""
    setup = CHECK.TINY._replace(min_sets=6)
    assert len(CHECK.input_sets(setup._replace(memory_bytes=1e12), 2, 100, False)) == 6
    assert len(CHECK.input_sets(setup._replace(memory_bytes=2.5 * 105_400), 2, 100, False)) == 2
    assert len(CHECK.input_sets(setup._replace(memory_bytes=1.0), 2, 100, False)) == 1  # one at least


@pytest.mark.skipif(fused.triton is None or os.environ.get("TRITON_INTERPRET") == "1",
                    reason="compiles the kernels with Triton's GPU compiler: needs Triton, and not TRITON_INTERPRET=1")
@pytest.mark.parametrize("dtype,single,stages,write,block", [
    ("bf16", False, 2, False, fused.BLOCK), ("bf16", True, 2, True, fused.BLOCK), ("bf16", False, 3, True, fused.BLOCK),
    ("bf16", True, 3, False, fused.BLOCK), ("fp32", False, 2, True, fused.BLOCK),
    ("bf16", True, 2, True, fused.WIDE_BLOCK), ("bf16", False, 2, False, fused.WIDE_BLOCK)])
def test_kernels_compile_for_an_h100(dtype, single, stages, write, block):
    """The kernels as the GPU runs them at the 7B shape (28 heads, 7 per key-value head, head_dim 128), in the tiles
    of one wave and of more (``default_block``), at every number of stages ``pipeline_stages`` gives that dtype and
    tile and at two (what a launch may ask), writing the step's new entries or not: they compile, within an H100's
    shared memory per block (227 KiB), their loads pipelined."""
    tile_bytes = block * 128 * (4 if dtype == "fp32" else 2)
    assert stages == fused.pipeline_stages(tile_bytes) or stages == fused.STAGES  # its own, and the one that always fits
    partial = f"*{dtype}" if single else "*fp32"
    pointers = dict(q_ptr=f"*{dtype}", k_ptr=f"*{dtype}", v_ptr=f"*{dtype}", mask_ptr="*u8", last_ptr="*i64",
                    out_ptr=f"*{dtype}", acc_ptr=partial, max_ptr=partial, sum_ptr=partial, new_k_ptr=f"*{dtype}",
                    new_v_ptr=f"*{dtype}")
    unit_strides = dict.fromkeys(["stride_qd", "stride_kd", "stride_vd", "stride_mc"], 1)  # Triton specialises 1s
    constants = dict(HEADS=28, GROUPS=7, DIM=128, SINGLE=single, PRECISION="ieee" if dtype == "fp32" else "tf32",
                     UPCAST=False, BLOCK_G=16, BLOCK_D=128, BLOCK_N=block, ROW_ENDS=True, ROW_SPLITS=True,
                     WRITE=write, **unit_strides)
    strides = [n for n in fused._split_kernel.arg_names if n.startswith(("stride_k", "stride_v", "stride_q")) or n == "chunk"]
    split = compile_for_h100(fused._split_kernel, pointers, constants, warps=fused.WARPS, stages=stages,
                             aligned=strides, floats=("qk_scale",))
    assert split.metadata.shared <= H100_SHARED_BYTES
    assert "async_copy_global_to_local" in split.asm["ttgir"]  # key and value tiles prefetched
    combine = compile_for_h100(fused._combine_kernel, dict(acc_ptr="*fp32", max_ptr="*fp32", sum_ptr="*fp32",
                               out_ptr=f"*{dtype}"), dict(DIM=128, BLOCK_S=fused.MAX_SPLITS, BLOCK_D=128), warps=4,
                               stages=fused.STAGES)
    assert combine.metadata.shared <= H100_SHARED_BYTES


@needs_kernels
@pytest.mark.parametrize("chunk", [64, 128, None], ids=["splits-of-64", "splits-of-128", "default-splits"])
def test_each_row_reads_its_own_slots_only(chunk):
    """Given each row's last slot that may be visible, the kernel reads nothing after it: values there are NaN
    (any read would make the output NaN), and the output is the float64 attention over the row's own slots."""
    batch, heads, kv_heads, length, dim = 4, 14, 2, 300, 64
    query, key, value, mask = inputs(batch, heads, kv_heads, length, dim, False, torch.bfloat16)
    last = torch.tensor([3, 40, 299, 130], device=DEVICE)
    mask = mask & (torch.arange(length, device=DEVICE) <= last.view(-1, 1, 1, 1))
    mask[1:, ..., 0] = True  # every row sees something
    beyond = torch.arange(length, device=DEVICE).view(1, 1, -1, 1) > last.view(-1, 1, 1, 1)
    poisoned = value.masked_fill(beyond, float("nan"))
    output = fused.flash_decode(query, key, poisoned, mask, dim**-0.5, last, chunk=chunk)
    assert output.isfinite().all()
    assert relative_error(output, reference(query, key, value, mask, dim**-0.5)) <= TOLERANCE[torch.bfloat16]
    everything = fused.flash_decode(query, key, value, mask, dim**-0.5, chunk=chunk)  # the whole bucket, masked
    assert relative_error(output, everything.double()) <= TOLERANCE[torch.bfloat16]


def test_last_slots_of_another_shape_leave_the_kernel_for_the_matmul_path():
    query, key, value, mask = (t.cpu() for t in inputs(2, 6, 2, 20, 16, False, torch.float32))
    assert not fused.kernel_fits(query, key, value, mask, torch.tensor([3]))
    assert not fused.kernel_fits(query, key, value, mask, torch.tensor([3, 4], dtype=torch.int32))
    expected = fused.matmul_attention(query, key, value, mask, 0.25)
    assert torch.equal(fused.fused_decode_attention(query, key, value, mask, 0.25, torch.tensor([19, 19])), expected)


def _rows_in_buffer(key, value, mask, last, length):
    """The same rows in a buffer of ``length`` slots: NaN keys and values after each row's ``last`` slot (a longer
    prompt's leftovers: any read makes the output NaN), none of them visible."""
    batch, kv_heads, own, dim = key.shape
    beyond = torch.arange(length, device=DEVICE).view(1, 1, -1, 1) > last.view(-1, 1, 1, 1)
    padded = [torch.nn.functional.pad(t, (0, 0, 0, length - own)).masked_fill(beyond, float("nan")) for t in (key, value)]
    return *padded, torch.nn.functional.pad(mask, (0, length - own))


BUFFERS = {  # each row's last slot; buffer lengths, the first the rows' own bucket
    "one-split-then-combined": ([3, 40, 63, 20], (64, 320, 700)),  # a single split (no combining), then 5 and 11
    "rows-split-then-coarser": ([3, 40, 299, 130], (320, 4096)),  # by the buffer's length: 64 then 128 slots a split
}


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("per_head", [False, True], ids=["per-row", "per-head"])
@pytest.mark.parametrize("ends,lengths", BUFFERS.values(), ids=BUFFERS.keys())
def test_a_row_sums_its_keys_in_the_same_order_in_any_buffer(ends, lengths, dtype, per_head):
    """Each row is split by its own length, not the buffer's, and the splits are combined over ``MAX_SPLITS`` lanes:
    the same rows in buffers of other lengths (other split counts launched, leftovers after each row's end) give
    the same bits, the float64 attention within rounding."""
    batch, heads, kv_heads, dim = len(ends), 14, 2, 64
    last = torch.tensor(ends, device=DEVICE)
    query, key, value, mask = inputs(batch, heads, kv_heads, lengths[0], dim, per_head, dtype)
    mask[..., 0] = True  # every row sees something
    mask &= torch.arange(lengths[0], device=DEVICE) <= last.view(-1, 1, 1, 1)
    outputs = []
    for length in lengths:
        big_key, big_value, big_mask = _rows_in_buffer(key, value, mask, last, length)
        outputs.append(fused.flash_decode(query, big_key, big_value, big_mask, dim**-0.5, last))
    assert all(torch.equal(outputs[0], other) for other in outputs[1:])
    assert relative_error(outputs[0], reference(query, key, value, mask, dim**-0.5)) <= TOLERANCE[dtype]


@needs_kernels
def test_each_row_is_split_as_split_sizes_splits_a_cache_of_its_length():
    """The kernel's own split of each row (from its end) is ``split_sizes``'s for that many slots: the row's output
    equals, bit for bit, a launch with that chunk for every row, and differs from one with twice the chunk (float32
    outputs show the order of the sums); long rows do split."""
    batch, heads, kv_heads, length, dim = 2, 14, 2, 1500, 64
    query, key, value, mask = inputs(batch, heads, kv_heads, length, dim, False, torch.float32)
    mask[0] = mask[1]  # row 0 of ``inputs`` sees one slot: here it sees half its slots, as row 1 does
    last = torch.tensor([700, 1499], device=DEVICE)
    mask = mask & (torch.arange(length, device=DEVICE) <= last.view(-1, 1, 1, 1))
    output = fused.flash_decode(query, key, value, mask, dim**-0.5, last)
    for row in range(batch):
        splits, chunk = fused.split_sizes(batch, kv_heads, int(last[row]) + 1, H100_PROCESSORS)
        assert splits > 1
        alone = fused.flash_decode(query, key, value, mask, dim**-0.5, last, chunk=chunk)
        assert torch.equal(output[row], alone[row])
        coarser = fused.flash_decode(query, key, value, mask, dim**-0.5, last, chunk=chunk * 2)
        assert not torch.equal(output[row], coarser[row])


@needs_kernels
def test_beyond_one_wave_a_row_splits_by_its_own_length_and_only_into_long_splits():
    """Beyond one wave (134 rows x 2 key-value heads: 268 programs for an H100's 264 places) a row splits only as far
    as each split keeps ``TAIL_MIN_TILES`` tiles of its own slots: a long row splits, a short one does not; each row's
    output equals a launch with its own chunk for every row, and the same rows in a buffer twice as long give the
    same bits (float32 outputs show the order of the sums), the float64 attention within rounding."""
    batch, heads, kv_heads, dim, block, length = 134, 4, 2, 16, 16, 544
    aim, floor = fused.split_aim(batch, kv_heads, H100_PROCESSORS), fused.split_floor(batch, kv_heads, H100_PROCESSORS)
    assert aim > 1 and floor == fused.TAIL_MIN_TILES
    query, key, value, mask = inputs(batch, heads, kv_heads, length, dim, False, torch.float32)
    mask[..., 0] = True  # every row sees something
    last = torch.randint(8, 64, (batch,), generator=torch.Generator().manual_seed(1)).to(DEVICE)  # short rows, and
    last[:2] = torch.tensor([length - 1, 300])  # a long one (34 tiles: splits) and one of 19 tiles (no split)
    mask &= torch.arange(length, device=DEVICE) <= last.view(-1, 1, 1, 1)
    output = fused.flash_decode(query, key, value, mask, dim**-0.5, last, block=block)
    roomier = fused.flash_decode(query, *_rows_in_buffer(key, value, mask, last, 2 * length), dim**-0.5, last, block=block)
    assert torch.equal(output, roomier)
    assert relative_error(output, reference(query, key, value, mask, dim**-0.5)) <= TOLERANCE[torch.float32]
    for row, splits in ((0, fused.splits_of(length // block, aim, floor)), (1, 1)):
        assert (splits > 1) == (row == 0)
        tiles = -(-(int(last[row]) + 1) // block)
        chunk = -(-tiles // splits) * block
        alone = fused.flash_decode(query, key, value, mask, dim**-0.5, last, chunk=chunk, block=block)
        assert torch.equal(output[row], alone[row])


@needs_kernels
def test_beyond_one_wave_a_launch_reads_wide_tiles():
    """Beyond one wave (268 programs) a launch left to its defaults reads ``WIDE_BLOCK``-slot tiles: its float32
    output equals a launch told that tile bit for bit, not one told ``BLOCK`` (the sums' order shows the tiles), and
    the float64 attention within rounding."""
    batch, heads, kv_heads, dim, length = 134, 4, 2, 16, 300
    assert fused.default_block(batch, kv_heads, H100_PROCESSORS) == fused.WIDE_BLOCK
    query, key, value, mask = inputs(batch, heads, kv_heads, length, dim, False, torch.float32)
    last = torch.full((batch,), length - 1, device=DEVICE)
    output = fused.flash_decode(query, key, value, mask, dim**-0.5, last)
    assert torch.equal(output, fused.flash_decode(query, key, value, mask, dim**-0.5, last, block=fused.WIDE_BLOCK))
    assert not torch.equal(output, fused.flash_decode(query, key, value, mask, dim**-0.5, last, block=fused.BLOCK))
    assert relative_error(output, reference(query, key, value, mask, dim**-0.5)) <= TOLERANCE[torch.float32]


def _written(key, value, columns, new):
    """Copies of ``key`` and ``value`` with row b's new entries at slot ``columns[b]`` (none past the cache)."""
    key, value = key.clone(), value.clone()
    for row, column in enumerate(columns.tolist()):
        if column < key.shape[2]:
            key[row, :, column], value[row, :, column] = new[0][row, :, 0], new[1][row, :, 0]
    return key, value


WRITES = {  # each row's column (its last slot); the slots a split takes (None: each row's own splits)
    "own-splits": ([3, 40, 299, 130], None),
    "fixed-splits": ([3, 64, 200, 127], 64),  # columns at a split's first and last slot
    "outside-the-cache": ([3, 300, 17, 299], 128),  # a column past the buffer: nothing written, as column_write
}


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("columns,chunk", WRITES.values(), ids=WRITES.keys())
def test_writing_the_new_entries_in_the_attention_kernel_equals_writing_them_first(columns, chunk, dtype):
    """The kernel that stores each row's new key and value at its column, then attends, gives what the cache write
    and then the attention give: the same cache bits and the same output bits."""
    batch, heads, kv_heads, length, dim = 4, 14, 2, 300, 64
    query, key, value, mask = inputs(batch, heads, kv_heads, length, dim, False, dtype)
    last = torch.tensor(columns, device=DEVICE)
    mask = mask & (torch.arange(length, device=DEVICE) <= last.view(-1, 1, 1, 1))
    mask[..., 0] = True
    mask.scatter_(-1, last.clamp(max=length - 1).view(-1, 1, 1, 1), True)  # the new column is visible
    generator = torch.Generator().manual_seed(1)
    new = tuple(torch.randn(batch, kv_heads, 1, dim, generator=generator).to(DEVICE, dtype) for _ in range(2))
    first_key, first_value = _written(key, value, last, new)
    expected = fused.flash_decode(query, first_key, first_value, mask, dim**-0.5, last, chunk=chunk)
    output = fused.flash_decode(query, key, value, mask, dim**-0.5, last, new_entries=new, chunk=chunk)
    assert torch.equal(key, first_key) and torch.equal(value, first_value)
    assert torch.equal(output, expected)
    assert not torch.equal(key, inputs(batch, heads, kv_heads, length, dim, False, dtype)[1])  # something was written


def test_off_the_kernels_new_entries_are_written_before_the_matmul_attention():
    """``decode_attention`` and the write-and-attend operator, given new entries on the matmul path (CPU tensors), write
    them at each row's column, then attend: the output is the matmul attention over the cache as written."""
    query, key, value, mask = (t.cpu() for t in inputs(2, 6, 2, 20, 16, False, torch.float32))
    last = torch.tensor([5, 19])
    new = tuple(torch.randn(2, 2, 1, 16) for _ in range(2))
    written_key, written_value = _written(key, value, last, new)
    expected = fused.matmul_attention(query, written_key, written_value, mask, 0.25)
    output = decode_attention(query, key, value, mask, 0.25, last_slots=last, new_entries=new)
    assert torch.equal(key, written_key) and torch.equal(value, written_value)
    assert torch.equal(output, expected)
    assert torch.equal(fused.write_and_attend(query, key.clone(), value.clone(), mask, last, list(new), scaling=0.25), expected)


@pytest.mark.usefixtures("one_thread")
def test_a_compiled_step_writes_the_new_entries_in_place_through_the_operator():
    """Compiled, the operator that writes and attends (as a CUDA step calls it) still writes into the caller's cache:
    the compiler keeps the mutation it declares."""
    query, key, value, mask = (t.cpu() for t in inputs(2, 6, 2, 20, 16, False, torch.float32))
    last = torch.tensor([5, 19])
    new = [torch.randn(2, 2, 1, 16) for _ in range(2)]
    written_key, written_value = _written(key, value, last, new)
    expected = fused.matmul_attention(query, written_key, written_value, mask, 0.25)
    step = torch.compile(lambda q, k, v: fused.write_and_attend(q, k, v, mask, last, new, scaling=0.25) * 2, fullgraph=True)
    output = step(query, key, value)
    assert torch.equal(key, written_key) and torch.equal(value, written_value)
    assert torch.allclose(output, expected * 2)
