"""Attention of one new token per row over a static cache, as one fused kernel per layer (flash decoding).

Written as two matrix products and a softmax, a decoder layer's decode attention compiles into about
three kernels (H100, 7B Omni shape: ~10 us per layer, 0.3 ms of a 6.1 ms step). Here a Triton kernel
does it in one pass over the cache, plus one small kernel when the cache is split:

* each program takes one row, one key-value head and one *split* (a run of cache slots): it loads each
  key and value tile once for all the query heads that share the key-value head (grouped-query
  attention), and keeps an online softmax (running maximum, sum and weighted values, float32);
* the number of splits aims at as many programs as the device runs at once, two per multiprocessor, and
  no more (``split_aim``), so that one row with four key-value heads still reads a long cache with every
  multiprocessor and no partial second wave trails the first; where the rows alone take more than one wave,
  splits shrink a nearly empty last wave (``tail_splits``), and tiles are twice as wide (``default_block``); a
  second kernel then combines the splits of each head (none where no row splits), over ``MAX_SPLITS`` lanes;
* given each row's last slot that may be visible (``last_slots``: the decode state's column), a program
  reads no slot after it, and splits its own slots as ``split_sizes`` would a cache of its length: in a
  batch of prompts of different lengths, a row pays for its own entries, not for the bucket the longest
  row needs, and sums its keys in the same order whatever the buffer's length and the other rows hold,
  so a call decodes the same numbers in a state of its own shape and in a roomier one;
* given the step's new key and value (``write_and_attend``), the program whose slots hold a row's last slot stores
  them there first: the cache write needs no kernel of its own.

The query heads of a key-value head form a (groups, head_dim) block, padded to 16 rows so that
``tl.dot`` runs the products on tensor cores: the kernel is bound by reading the cache, and the padded
rows cost no bandwidth, whereas an elementwise multiply-and-sum would make one pass over each tile per
query head on the CUDA cores plus a cross-thread reduction each (7 per tile at the 7B shape).

``decode_attention`` is a custom operator (``kvprune::decode_attention``), opaque to ``torch.compile``
and capturable in a CUDA graph (static shapes, no host synchronisation); without Triton, off CUDA or
for shapes it does not take, it computes ``matmul_attention``, the plain PyTorch version.
"""

from __future__ import annotations

import functools

import torch

from .column_write import write_column
from .dependent_launch import launch_options
from .matmul_attention import matmul_attention
from .triton_support import tl, triton

BLOCK = 64  # cache slots per tile where the (row, key-value head) programs fit one wave (``default_block``)
WIDE_BLOCK = 128  # ... and beyond one wave
WARPS = 4
STAGES = 2  # loads in flight per program where a tile is too large for ``DEEP_STAGES`` (see ``pipeline_stages``)
DEEP_STAGES = 3
DEEP_TILE_BYTES = 64 * 128 * 2  # the largest key tile with which two programs of three stages share a multiprocessor
PROGRAMS_PER_PROCESSOR = 2  # programs resident on a multiprocessor at once: split until the grid fills them, no more
MAX_SPLITS = 64  # the combining kernel holds every split of a head at once
TAIL_SPLITS = 8  # beyond one wave of programs, the most splits ``tail_splits`` weighs
TAIL_SLACK = 0.03  # ``tail_splits`` takes the fewest splits within this share of the fewest waves per unit of work
TAIL_GAIN = 0.1  # ... and only where they save at least this share of the waves of one split
TAIL_MIN_TILES = 16  # beyond one wave, the fewest tiles a split keeps (``split_floor``)
H100_PROCESSORS = 132
LOG2_E = 1.4426950408889634
KERNEL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # what the kernels take (``kernel_fits``)
WRITE_IN_KERNEL = True  # a decode step's new keys and values stored by the attention's kernel, not one of their own


def split_aim(batch: int, kv_heads: int, processors: int) -> int:
    """Splits per (row, key-value head). Where the ``batch * kv_heads`` programs fit one wave (``PROGRAMS_PER_PROCESSOR``
    on each of ``processors``): the most splits whose programs all run at once, at most ``MAX_SPLITS`` (programs
    beyond run as a second, partial wave after the first: at three stages, 16 rows x 4 key-value heads read 1.27x
    slower in 5 splits, 320 programs on an H100's 264 places, than in 4). Beyond one wave: ``tail_splits``."""
    places, programs = PROGRAMS_PER_PROCESSOR * processors, batch * kv_heads
    if not one_wave(batch, kv_heads, processors):
        return tail_splits(programs, places)
    return max(1, min(places // programs, MAX_SPLITS))


def one_wave(batch: int, kv_heads: int, processors: int) -> bool:
    """Whether the (row, key-value head) programs unsplit run at once (``PROGRAMS_PER_PROCESSOR`` on each of
    ``processors``): the splits then fill the wave (``split_aim``), else they shrink its last (``tail_splits``)."""
    return batch * kv_heads <= PROGRAMS_PER_PROCESSOR * processors


def tail_splits(programs: int, places: int) -> int:
    """Splits for more programs than one wave has places: the last wave may be nearly empty and take as long as a
    full one (139 rows x 4 key-value heads at 7,700 slots: 556 programs, 2 waves and 28 programs, read 1.33x slower
    than 132 rows; H100, 2026-12-06). Splitting cuts every program's work, so that the last wave's share shrinks: the
    fewest splits (at most ``TAIL_SPLITS``) within ``TAIL_SLACK`` of the fewest waves per unit of work, taken only where
    that saves at least ``TAIL_GAIN`` of the waves one split takes (a split costs its combining pass and ~3%; FastV 0.9
    at 800 rows, 12.1 waves, split in three for a 5% saving with splits of 4 tiles allowed: 9% slower; H100, 2026-12-07)."""
    waves = {splits: -(-programs * splits // places) / splits for splits in range(1, TAIL_SPLITS + 1)}
    fewest = min(waves.values())
    splits = min(s for s, w in waves.items() if w <= fewest * (1 + TAIL_SLACK))
    return splits if waves[splits] <= (1 - TAIL_GAIN) * waves[1] else 1


def default_block(batch: int, kv_heads: int, processors: int) -> int:
    """Cache slots per tile: ``BLOCK`` within one wave, ``WIDE_BLOCK`` beyond it, where a program reads a row's whole
    cache and fewer tiles cost it less of the loop's fixed work (``docs/benchmarks.md``, H100, 2026-12-07)."""
    return BLOCK if one_wave(batch, kv_heads, processors) else WIDE_BLOCK


def split_floor(batch: int, kv_heads: int, processors: int) -> int:
    """Tiles a split keeps at least: one within a wave; ``TAIL_MIN_TILES`` beyond it, where splitting a short cache
    costs more than the last wave's share it saves (FastV 0.9's layers >= K, ~1,000 slots, at 139 rows: 1.2% slower
    in six splits; H100, 2026-12-06)."""
    return 1 if one_wave(batch, kv_heads, processors) else TAIL_MIN_TILES


def splits_of(tiles: int, aim: int, floor: int) -> int:
    """Splits of a cache of ``tiles`` tiles: at most ``aim``, each at least ``floor`` tiles (one at least). The
    kernel sizes each row's splits so from its own slots."""
    return max(1, min(aim, tiles // floor))


def split_sizes(batch: int, kv_heads: int, length: int, processors: int, block: int | None = None) -> tuple[int, int]:
    """(splits, slots per split) for a cache of ``length`` slots: at most ``split_aim`` splits, each as few
    whole tiles as that aim allows; so no split is empty, and a long cache splits more than a short one.
    The kernel splits each row's own slots by the same rule where it is given the rows' ends. ``block``:
    ``default_block`` unless told (read at the call, as every launch default here: setting a module value changes it)."""
    block = block or default_block(batch, kv_heads, processors)
    tiles = -(-length // block)
    splits = splits_of(tiles, split_aim(batch, kv_heads, processors), split_floor(batch, kv_heads, processors))
    chunk = -(-tiles // splits) * block
    return -(-length // chunk), chunk


def pipeline_stages(tile_bytes: int) -> int:
    """Stages of the key and value loads: ``DEEP_STAGES`` where two programs of key and value tiles of ``tile_bytes``
    fit a multiprocessor's shared memory that deep (bf16 or fp16 at head dim up to 128), else ``STAGES``. With the
    grid at most one wave (``split_aim``), three stages read as fast as two or faster at every batch measured, 1 to
    128 rows (H100, bf16, head dim 128, each row's own slots, 2026-12-06: 1.04-1.16x faster at 2-128 rows, equal at
    1)."""
    return DEEP_STAGES if tile_bytes <= DEEP_TILE_BYTES else STAGES


def default_stages(query: torch.Tensor, block: int | None = None) -> int:
    """The stages ``flash_decode`` launches with for ``query`` unless told: ``pipeline_stages`` of its key tiles
    (``block`` slots, ``BLOCK`` unless told, of the head dim as the kernel pads it, in the query's dtype)."""
    return pipeline_stages((block or BLOCK) * _padded_dim(query.shape[-1]) * query.element_size())


def _padded_dim(dim: int) -> int:
    """The head dim as the kernels tile it: a power of two, at least 16."""
    return max(16, triton.next_power_of_2(dim))


@functools.lru_cache(maxsize=None)
def _processors(device: torch.device) -> int:
    """A CUDA device's multiprocessors; elsewhere (Triton's interpreter, on the CPU) an H100's, so that
    the interpreter splits caches as the GPU does."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else H100_PROCESSORS


if triton is not None:

    @triton.jit
    def _dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
        if UPCAST:  # float32 copies of the same values: exact products, float32 sums, as the tensor cores do
            product = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            product = tl.dot(a, b, input_precision=PRECISION)
        return product

    # a buffer's length and the mask's strides that follow it: Triton would specialise the ones divisible by 16,
    # and float32 outputs then round otherwise in a buffer of another length (seen on an H100: 1 ulp)
    @triton.jit(do_not_specialize=["length", "stride_mb", "stride_mh"])
    def _split_kernel(
        q_ptr, k_ptr, v_ptr, mask_ptr, last_ptr, out_ptr, acc_ptr, max_ptr, sum_ptr, new_k_ptr, new_v_ptr, length, chunk,
        splits, aim, min_tiles, qk_scale,
        stride_qb, stride_qh, stride_qd, stride_kb, stride_kh, stride_kc, stride_kd,
        stride_vb, stride_vh, stride_vc, stride_vd, stride_mb, stride_mh, stride_mc, stride_nkb, stride_nkh, stride_nkd,
        stride_nvb, stride_nvh, stride_nvd,
        HEADS: tl.constexpr, GROUPS: tl.constexpr, DIM: tl.constexpr, SINGLE: tl.constexpr, PRECISION: tl.constexpr,
        UPCAST: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
        ROW_ENDS: tl.constexpr, ROW_SPLITS: tl.constexpr, WRITE: tl.constexpr = False, PDL: tl.constexpr = False,
    ):
        """Slots ``split*chunk ..`` of one row and key-value head for its query heads (none after the row's
        last slot where ``ROW_ENDS``; ``chunk`` from the row's own slots, ``aim`` and ``min_tiles`` where ``ROW_SPLITS``, as
        ``split_sizes`` would for a cache of that length): the final output if there is one split
        (``SINGLE``), else the split's running maximum, sum and weighted values. ``WRITE`` (with ``ROW_ENDS``): the
        program whose slots hold the row's last slot first stores the row's new key and value there, as
        ``column_write`` would, then reads its slots as written (one kernel a layer fewer)."""
        kv_heads: tl.constexpr = HEADS // GROUPS
        b = (tl.program_id(0) // kv_heads).to(tl.int64)
        kv = (tl.program_id(0) % kv_heads).to(tl.int64)
        split = tl.program_id(1)
        if PDL:  # a dependent launch (``dependent_launch``): the queries are the kernel before's output
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, BLOCK_D)
        head = kv * GROUPS + g  # the query heads of this key-value head
        in_g, in_d = g < GROUPS, d < DIM
        q = tl.load(q_ptr + b * stride_qb + head[:, None] * stride_qh + d[None, :] * stride_qd,
                    mask=in_g[:, None] & in_d[None, :], other=0.0)
        keys = k_ptr + b * stride_kb + kv * stride_kh + d[None, :] * stride_kd
        values = v_ptr + b * stride_vb + kv * stride_vh + d[None, :] * stride_vd
        visible_at = mask_ptr + b * stride_mb + head[:, None] * stride_mh  # stride_mh is 0 for a mask per row
        running_max = tl.full((BLOCK_G,), float("-inf"), tl.float32)
        running_sum = tl.zeros((BLOCK_G,), tl.float32)
        acc = tl.zeros((BLOCK_G, BLOCK_D), tl.float32)
        if ROW_ENDS:
            row_end = tl.load(last_ptr + b).to(tl.int32) + 1
            if ROW_SPLITS:
                tiles = tl.cdiv(row_end, BLOCK_N)
                chunk = tl.cdiv(tiles, tl.maximum(tl.minimum(aim, tiles // min_tiles), 1)) * BLOCK_N  # ``splits_of``
        start = split * chunk
        end = tl.minimum(start + chunk, length)
        if ROW_ENDS:
            end = tl.minimum(end, row_end)
        if WRITE:  # a column outside this program's slots, or outside the cache, writes nothing
            column = row_end - 1
            written = d < DIM * tl.where((column >= start) & (column < end), 1, 0)  # read only by the program storing
            new_k = tl.load(new_k_ptr + b * stride_nkb + kv * stride_nkh + d * stride_nkd, mask=written)
            tl.store(k_ptr + b * stride_kb + kv * stride_kh + column * stride_kc + d * stride_kd, new_k, mask=written)
            new_v = tl.load(new_v_ptr + b * stride_nvb + kv * stride_nvh + d * stride_nvd, mask=written)
            tl.store(v_ptr + b * stride_vb + kv * stride_vh + column * stride_vc + d * stride_vd, new_v, mask=written)
            tl.debug_barrier()  # every thread of the program reads the slot as stored
        for n0 in range(start, end, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            in_n = n < end
            k = tl.load(keys + n[:, None] * stride_kc, mask=in_n[:, None] & in_d[None, :], other=0.0)
            scores = _dot(q, tl.trans(k), PRECISION, UPCAST) * qk_scale  # log2 units
            visible = tl.load(visible_at + n[None, :] * stride_mc, mask=in_g[:, None] & in_n[None, :], other=0)
            scores = tl.where(visible != 0, scores, float("-inf"))
            new_max = tl.maximum(running_max, tl.max(scores, axis=1))
            shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # nothing visible yet: keep zeros, no NaN
            p = tl.exp2(scores - shift[:, None])
            rescale = tl.exp2(running_max - shift)
            running_sum = running_sum * rescale + tl.sum(p, axis=1)
            v = tl.load(values + n[:, None] * stride_vc, mask=in_n[:, None] & in_d[None, :], other=0.0)
            acc = acc * rescale[:, None] + _dot(p.to(v.dtype), v, PRECISION, UPCAST)
            running_max = new_max
        vector = b * HEADS + head  # (row, query head) in the output's order
        store = in_g[:, None] & in_d[None, :]
        if SINGLE:
            out = acc / running_sum[:, None]
            tl.store(out_ptr + vector[:, None] * DIM + d[None, :], out.to(out_ptr.dtype.element_ty), mask=store)
        else:
            part = vector * splits + split
            tl.store(acc_ptr + part[:, None] * DIM + d[None, :], acc, mask=store)
            tl.store(max_ptr + part, running_max, mask=in_g)
            tl.store(sum_ptr + part, running_sum, mask=in_g)

    @triton.jit
    def _combine_kernel(acc_ptr, max_ptr, sum_ptr, out_ptr, splits, DIM: tl.constexpr, BLOCK_S: tl.constexpr,
                        BLOCK_D: tl.constexpr, PDL: tl.constexpr = False):
        """One (row, query head): its splits' weighted values, rescaled to the overall maximum, over their sums
        (``BLOCK_S`` lanes, ``MAX_SPLITS`` for any split count up to it: lanes with nothing add exact zeros, in the
        same order)."""
        vector = tl.program_id(0).to(tl.int64)
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        s = tl.arange(0, BLOCK_S)
        d = tl.arange(0, BLOCK_D)
        in_s, in_d = s < splits, d < DIM
        part = vector * splits + s
        maxima = tl.load(max_ptr + part, mask=in_s, other=float("-inf"))
        weights = tl.exp2(maxima - tl.max(maxima, axis=0))  # a split that saw nothing weighs 0
        sums = tl.load(sum_ptr + part, mask=in_s, other=0.0)
        acc = tl.load(acc_ptr + part[:, None] * DIM + d[None, :], mask=in_s[:, None] & in_d[None, :], other=0.0)
        out = tl.sum(acc * weights[:, None], axis=0) / tl.sum(sums * weights, axis=0)
        tl.store(out_ptr + vector * DIM + d, out.to(out_ptr.dtype.element_ty), mask=in_d)


def kernel_fits(query, key, value, mask, last_slots=None, new_entries=None) -> bool:
    """Whether ``flash_decode`` takes these tensors (else ``decode_attention`` computes ``matmul_attention``)."""
    batch, heads, tokens, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    if last_slots is not None and (last_slots.shape != (batch,) or last_slots.dtype != torch.long):
        return False
    if new_entries is not None and (last_slots is None or any(
            t.shape != (batch, kv_heads, 1, dim) or t.dtype != key.dtype or t.device != key.device for t in new_entries)):
        return False
    return (
        triton is not None and query.is_cuda and tokens == 1 and query.dtype in KERNEL_DTYPES
        and key.dtype == value.dtype == query.dtype and heads % kv_heads == 0
        and key.shape == value.shape == (batch, kv_heads, length, dim)
        and mask.dtype == torch.bool and mask.shape in ((batch, 1, 1, length), (batch, heads, 1, length))
    )


def flash_decode(query, key, value, mask, scaling: float, last_slots: torch.Tensor | None = None, *,
                 new_entries: tuple[torch.Tensor, torch.Tensor] | None = None, chunk: int | None = None,
                 block: int | None = None, warps: int | None = None, stages: int | None = None) -> torch.Tensor:
    """``matmul_attention`` by the Triton kernels (tensors that ``kernel_fits``), reading no slot of a row
    after ``last_slots[row]`` if given (no slot after it may be visible), each row split by its own length
    unless ``chunk`` is given. ``new_entries`` (each row's new key and value, (B, kv_heads, 1, D), with
    ``last_slots``): written at the row's last slot first, in place, as ``column_write.write_column`` would.
    ``chunk`` (slots per split for every row, a multiple of ``block``), ``block``, ``warps`` and ``stages``
    override the launch defaults (the module's values, read at the call)."""
    if new_entries is not None and last_slots is None:
        raise ValueError("flash_decode: new_entries are written at each row's last slot; give last_slots.")
    new_key, new_value = (query, query) if new_entries is None else new_entries  # not read without new entries
    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    processors = _processors(query.device)
    block, warps = block or default_block(batch, kv_heads, processors), warps or WARPS
    aim, floor = split_aim(batch, kv_heads, processors), split_floor(batch, kv_heads, processors)
    row_splits = chunk is None and last_slots is not None
    if row_splits:  # enough programs for the longest row a buffer of this length holds; the kernel sizes each.
        # A row that may split is combined in every buffer, even one of a single split, so that its output
        # comes from one epilogue whatever the buffer (the one-split kernel divides on its own)
        splits, chunk, combined = splits_of(-(-length // block), aim, floor), 0, aim > 1
    else:
        chunk = chunk or split_sizes(batch, kv_heads, length, processors, block)[1]
        splits = -(-length // chunk)
        combined = splits > 1
    out = query.new_empty(batch, 1, heads, dim)
    if combined:
        acc = torch.empty(batch * heads * splits, dim, dtype=torch.float32, device=query.device)
        maxima, sums = torch.empty(2, batch * heads * splits, dtype=torch.float32, device=query.device)
    else:  # not read: the kernel writes the output itself
        acc = maxima = sums = out
    mask = mask.view(torch.uint8)  # the same bytes; Triton loads them as integers
    block_d = _padded_dim(dim)
    stages = stages or default_stages(query, block)
    pdl = launch_options(query.device)
    _split_kernel[(batch * kv_heads, splits)](
        query, key, value, mask, mask if last_slots is None else last_slots, out, acc, maxima, sums, new_key, new_value,
        length, chunk, splits, aim, floor, scaling * LOG2_E,
        query.stride(0), query.stride(1), query.stride(3), *key.stride(), *value.stride(),
        mask.stride(0), mask.stride(1) if mask.shape[1] > 1 else 0, mask.stride(3),
        new_key.stride(0), new_key.stride(1), new_key.stride(3), new_value.stride(0), new_value.stride(1), new_value.stride(3),
        HEADS=heads, GROUPS=heads // kv_heads, DIM=dim, SINGLE=not combined,
        PRECISION="ieee" if query.dtype == torch.float32 else "tf32",
        UPCAST=not query.is_cuda,  # Triton's interpreter (CPU) multiplies bfloat16 as integers
        BLOCK_G=max(16, triton.next_power_of_2(heads // kv_heads)), BLOCK_D=block_d, BLOCK_N=block,
        ROW_ENDS=last_slots is not None, ROW_SPLITS=row_splits, WRITE=new_entries is not None, num_warps=warps,
        num_stages=stages, **pdl,
    )
    if combined:
        _combine_kernel[(batch * heads,)](acc, maxima, sums, out, splits, DIM=dim,
                                          BLOCK_S=max(MAX_SPLITS, triton.next_power_of_2(splits)),
                                          BLOCK_D=block_d, num_warps=4, **pdl)
    return out


@torch.library.custom_op("kvprune::decode_attention", mutates_args=())
def fused_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                           scaling: float, last_slots: torch.Tensor | None = None) -> torch.Tensor:
    """``matmul_attention`` in one fused kernel (two when the cache is split) where ``kernel_fits``, reading
    each row's slots up to ``last_slots`` only (if given)."""
    if kernel_fits(query, key, value, mask, last_slots):
        return flash_decode(query, key, value, mask, scaling, last_slots)
    return matmul_attention(query, key, value, mask, scaling)


def _output_like(query: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """The attention operators' output as the compiler sees it: (B, 1, heads, D), the query's dtype and device."""
    batch, heads, _, dim = query.shape
    return query.new_empty(batch, 1, heads, dim)


fused_decode_attention.register_fake(_output_like)


@torch.library.custom_op("kvprune::write_and_attend", mutates_args=("key", "value"))
def write_and_attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                     last_slots: torch.Tensor, new_entries: list[torch.Tensor], *, scaling: float) -> torch.Tensor:
    """Each row's new key and value (``new_entries``) written at its slot ``last_slots[row]``, then
    ``fused_decode_attention``: in the attention's one kernel where ``kernel_fits`` (the cache write's 28 launches a
    step saved at the 7B shape: FastV 0.9's 64-row step 7.93 against 7.96 ms, H100, 2026-12-07)."""
    if kernel_fits(query, key, value, mask, last_slots, new_entries):
        return flash_decode(query, key, value, mask, scaling, last_slots, new_entries=tuple(new_entries))
    write_column(key, value, last_slots, *new_entries)
    return matmul_attention(query, key, value, mask, scaling)


write_and_attend.register_fake(_output_like)


def fused_kernels_run(device: torch.device, fused: bool = True, dtype: torch.dtype | None = None) -> bool:
    """Whether ``decode_attention`` on ``device`` runs the fused kernels (for queries, keys and values of ``dtype``
    if given: the kernels take ``KERNEL_DTYPES``), which split each row by its own length: a row's numbers then do
    not depend on the length of the buffer it is decoded in."""
    return fused and triton is not None and torch.device(device).type == "cuda" and dtype in (None, *KERNEL_DTYPES)


def decode_attention(query, key, value, mask, scaling: float | None = None, *, fused: bool = True,
                     last_slots: torch.Tensor | None = None,
                     new_entries: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Attention of one new token per row over a static cache (see ``matmul_attention``; ``scaling``
    defaults to head_dim ** -0.5): the fused kernels on CUDA with Triton (which read each row's slots up
    to ``last_slots`` only, where given: the mask makes none after it visible), else ``matmul_attention``
    itself, which a compiled step on the CPU fuses with its neighbours. ``new_entries`` (each row's new key and
    value, with ``last_slots``): written at the row's last slot first (by the attention's kernel where
    ``WRITE_IN_KERNEL`` and the kernels run, else by ``column_write.write_column``)."""
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    if new_entries is not None:
        if WRITE_IN_KERNEL and fused_kernels_run(query.device, fused):
            return write_and_attend(query, key, value, mask, last_slots, list(new_entries), scaling=scaling)
        write_column(key, value, last_slots, *new_entries)
    if fused_kernels_run(query.device, fused):
        return fused_decode_attention(query, key, value, mask, scaling, last_slots)
    return matmul_attention(query, key, value, mask, scaling)
