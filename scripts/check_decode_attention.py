"""Check the fused decode attention (``kvprune::decode_attention``) on a GPU: its error against float64
attention, and its speed against the matmul path it replaces and against SDPA.

    python scripts/check_decode_attention.py                  # one CUDA GPU, under 2 min on an H100
    python scripts/check_decode_attention.py --no-sweep       # without the sweep of launch settings (~40 s)
    python scripts/check_decode_attention.py --batches 1,16,64 --no-sweep   # 64 rows too (~30 GB of input sets)
    python scripts/check_decode_attention.py --batches 818 --lengths 842,7606 --no-sweep   # FastV 0.9's largest batch
    TRITON_INTERPRET=1 python scripts/check_decode_attention.py --tiny   # small shapes on the CPU: a smoke test

Shapes: the Qwen2.5-Omni-7B thinker's attention (28 heads, 4 key-value heads, head_dim 128, bfloat16),
batch 1 and 16, caches of 900 slots (pruned) and 7,700 (unpruned, about 5 min of audio), with a mask
per row, or per head (head-wise compression). Each row's entries come first (a random 85-100 % of the
slots; the rest is filler, never visible), a mask per head has 30 % random holes, and row 1 sees its
first slot only (every later split of its cache sees nothing).

1. accuracy: the kernel, the matmul path (``matmul_attention``, eager) and SDPA against float64
   attention (largest |error| of a (row, head) output over its largest |reference| value), in
   bfloat16, and in float16 and float32 on one shape each;
2. capture: ``decode_attention`` compiled (``torch.compile(fullgraph=True)``, as the decode step is) and
   captured in a CUDA graph gives the kernel's output bit for bit; the kernels one call launches;
3. speed: microseconds per call, the median over CUDA-graph replays of one graph that calls each
   method once per input set (at least 28 sets, as many layers, and twice the L2 cache in keys and
   values, so no call finds its cache in L2): the kernel (default launch), the matmul path compiled
   (``torch.compile(dynamic=True)``: the decode step's lengths are dynamic) and SDPA (``enable_gqa``);
3b. mixed lengths: batches whose rows end at 20-100 % of the bucket, the kernel told each row's last slot
   (``last_slots``, as the decode step does; each row split by its own length, and by the bucket's) against
   the kernel reading the whole bucket;
4. sweep (per-row masks): the kernel's time for other tile sizes, warps, stages and splits, to tune the
   defaults (stops when the run has lasted ``--budget`` seconds).

At large batches the float64 reference covers the first ``reference_rows`` rows of the kernel's output (the
kernel itself runs on the whole batch, whose launch is what is checked), and a timed graph holds as many input
sets as ``memory_bytes`` (a share of the device's free memory) affords, at least one.

Exits with status 1 if an error is above its tolerance (bfloat16 and float16 1e-2, float32 1e-4), is
not finite, or the captured output differs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from typing import NamedTuple

import torch
import torch.nn.functional as F

from kvprune.generation import decode_attention as fused

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 1e-2, torch.float32: 1e-4}
LAYERS = 28  # the 7B thinker's decoder layers: at least this many input sets per timed graph


class Setup(NamedTuple):
    device: str
    heads: int
    kv_heads: int
    dim: int
    batches: tuple[int, ...]
    lengths: tuple[int, ...]
    l2_bytes: int  # the input sets of a timed graph hold at least twice this in keys and values
    min_sets: int
    replays: int
    graphs: bool  # time CUDA-graph replays (else plain calls: the smoke test on the CPU)
    reference_rows: int  # rows compared with the float64 reference (heads repeated: 0.44 GB a row at 7,700 slots)
    memory_bytes: float  # the most a timed graph's input sets may take


MEMORY_SHARE = 0.35  # of the device's free memory at the start, for a timed graph's input sets


def gpu_setup() -> Setup:
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    return Setup("cuda", 28, 4, 128, (1, 16), (900, 7700), l2, LAYERS, replays=25, graphs=True, reference_rows=8,
                 memory_bytes=MEMORY_SHARE * torch.cuda.mem_get_info()[0])


TINY = Setup("cpu", 14, 2, 64, (1, 2), (100, 300), 0, 1, replays=1, graphs=False, reference_rows=2, memory_bytes=1e12)


def reference_attention(query, key, value, mask, scaling):
    """Softmax attention in float64 with every key-value head repeated for its query heads: (B, 1, heads, D)."""
    groups = query.shape[1] // key.shape[1]
    key, value = (t.double().repeat_interleave(groups, dim=1) for t in (key, value))
    scores = (query.double() @ key.transpose(-1, -2)) * scaling
    return (scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ value).transpose(1, 2)


def relative_error(output, expected) -> float:
    """Largest |error| of a (row, head) output over its largest |expected| value (NaN if any is NaN)."""
    error = (output.double() - expected).abs().amax(-1) / expected.abs().amax(-1)
    return float("nan") if error.isnan().any() else error.max().item()


def make_inputs(setup: Setup, batch: int, length: int, per_head: bool, dtype, seed: int = 0) -> tuple:
    """Query (the model's layout: (B, 1, heads, D) transposed), keys, values and mask (module docstring),
    drawn on the device."""
    generator, device = torch.Generator(setup.device).manual_seed(seed), setup.device
    query = torch.randn(batch, 1, setup.heads, setup.dim, generator=generator, device=device, dtype=dtype).transpose(1, 2)
    key, value = (torch.randn(batch, setup.kv_heads, length, setup.dim, generator=generator, device=device, dtype=dtype)
                  for _ in range(2))  # drawn in ``dtype``: at large batches a float32 draw would double the memory
    widths = torch.randint(int(0.85 * length), length + 1, (batch,), generator=generator, device=device)
    mask = (torch.arange(length, device=device) < widths[:, None])[:, None, None, :]
    mask = mask.repeat(1, setup.heads if per_head else 1, 1, 1)
    if per_head:
        mask &= torch.rand(mask.shape, generator=generator, device=device) > 0.3
        mask[..., 0] = True
    if batch > 1:
        mask[1] = False
        mask[1, ..., 0] = True
    return query, key, value, mask


def sdpa(query, key, value, mask, scaling):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling, enable_gqa=True).transpose(1, 2)


def accuracy(setup: Setup, out) -> bool:
    cases = [(b, n, per_head, torch.bfloat16) for b in setup.batches for n in setup.lengths for per_head in (False, True)]
    cases += [(setup.batches[0], setup.lengths[-1], True, torch.float16), (setup.batches[0], setup.lengths[0], False, torch.float32)]
    print("1. accuracy: largest error over the largest reference value, per (row, head) output "
          f"(of a batch of more rows, its first {setup.reference_rows})", file=out)
    print(f"{'batch':>5} {'slots':>6} {'mask':>5} {'dtype':>9} {'kernel':>9} {'matmul':>9} {'sdpa':>9}  splits x slots", file=out)
    ok = True
    for batch, length, per_head, dtype in cases:
        query, key, value, mask = make_inputs(setup, batch, length, per_head, dtype)
        scaling = setup.dim**-0.5
        checked = [t[: setup.reference_rows] for t in (query, key, value, mask)]  # the kernel runs on every row
        expected = reference_attention(*checked, scaling)
        errors = [relative_error(fused.flash_decode(query, key, value, mask, scaling)[: setup.reference_rows], expected)]
        for other in (fused.matmul_attention, sdpa):  # for comparison only: a failure is reported, not fatal
            try:
                errors.append(relative_error(other(*checked, scaling), expected))
            except Exception as error:
                print(f"   {other.__name__}: {type(error).__name__}: {error}", file=out)
                errors.append(float("nan"))
        passed = errors[0] <= TOLERANCE[dtype]  # False for NaN
        ok &= passed
        splits, chunk = fused.split_sizes(batch, setup.kv_heads, length, fused._processors(query.device))
        print(f"{batch:>5} {length:>6} {'head' if per_head else 'row':>5} {str(dtype)[6:]:>9} "
              + " ".join(f"{e:>9.2e}" for e in errors) + f"  {splits} x {chunk}" + ("" if passed else "  <- FAILS"), file=out)
        del expected
    return ok


def capture(setup: Setup, compiled_matmul, out) -> bool:
    """The compiled dispatch in a CUDA graph equals the eager kernel; the kernels one call launches."""
    print("2. capture", file=out)
    if not setup.graphs:
        print("   skipped: no CUDA", file=out)
        return True
    query, key, value, mask = make_inputs(setup, setup.batches[0], setup.lengths[-1], True, torch.bfloat16)
    scaling = setup.dim**-0.5
    step = torch.compile(lambda q, k, v, m: fused.decode_attention(q, k, v, m, scaling), fullgraph=True)
    graph, output = graphed(lambda: step(query, key, value, mask))
    graph.replay()
    same = torch.equal(output, fused.flash_decode(query, key, value, mask, scaling))
    print(f"   compiled decode_attention replayed in a CUDA graph equals the kernel bit for bit: {same}", file=out)
    for name, call in [("kernel", lambda: fused.flash_decode(query, key, value, mask, scaling)),
                       ("matmul (compiled)", lambda: compiled_matmul(query, key, value, mask, scaling))]:
        print(f"   kernels per call, {name}: {launched_kernels(call)}", file=out)
    return same


def graphed(call):
    """``call`` warmed up on a side stream (compiling), then captured: (graph, the captured call's result)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = call()
    return graph, result


def launched_kernels(call) -> str:
    """How many kernels one ``call`` launches, and their names (from the profiler; informative only)."""
    from torch.profiler import ProfilerActivity, profile

    try:
        call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    except Exception as error:  # the profiler is a nicety: never fail the check on it
        return f"unknown ({type(error).__name__}: {error})"
    return f"{len(names)} ({', '.join(name[:48] for name in names)})"


def input_sets(setup: Setup, batch: int, length: int, per_head: bool) -> list[tuple]:
    """Enough input sets that one pass over them reads ``min_sets`` caches and twice the L2 cache, as many as
    ``memory_bytes`` affords (one at least: a set of a large batch is itself many times the L2 cache)."""
    kv_bytes = 2 * batch * setup.kv_heads * length * setup.dim * 2
    set_bytes = kv_bytes + batch * length * (setup.heads + 1)  # keys and values; the mask, per head at most
    wanted = max(setup.min_sets, math.ceil(2 * setup.l2_bytes / kv_bytes))
    count = max(1, min(wanted, int(setup.memory_bytes // set_bytes)))
    return [make_inputs(setup, batch, length, per_head, torch.bfloat16, seed) for seed in range(count)]


def time_per_call(setup: Setup, function, sets: list[tuple]) -> float:
    """Median microseconds per call of ``function(*inputs, scaling)`` over the ``sets`` of inputs (one graph:
    one call per set)."""
    scaling = setup.dim**-0.5

    def every_set():
        for inputs in sets:
            function(*inputs, scaling)

    if not setup.graphs:
        start = time.perf_counter()
        every_set()
        return (time.perf_counter() - start) * 1e6 / len(sets)
    graph, _ = graphed(every_set)
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(setup.replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(sets))
    return statistics.median(times)


def speed(setup: Setup, compiled_matmul, out) -> None:
    methods = {"kernel": fused.flash_decode, "matmul (compiled)": compiled_matmul, "sdpa gqa": sdpa}
    print("3. speed: microseconds per call (median of CUDA-graph replays), kernel's read bandwidth", file=out)
    print(f"{'batch':>5} {'slots':>6} {'mask':>5} {'sets':>5} " + " ".join(f"{m:>18}" for m in methods) + "  kernel GB/s", file=out)
    for batch in setup.batches:
        for length in setup.lengths:
            for per_head in (False, True):
                sets = input_sets(setup, batch, length, per_head)
                kernel_us = time_per_call(setup, fused.flash_decode, sets)
                cells = [f"{kernel_us:>18.1f}"]
                for function in list(methods.values())[1:]:
                    try:
                        cells.append(f"{time_per_call(setup, function, sets):>18.1f}")
                    except Exception as error:  # SDPA may refuse a mask or layout on some builds: say so, go on
                        cells.append(f"{type(error).__name__:>18}")
                kv_bytes = 2 * batch * setup.kv_heads * length * setup.dim * 2
                print(f"{batch:>5} {length:>6} {'head' if per_head else 'row':>5} {len(sets):>5} " + " ".join(cells)
                      + f"  {kv_bytes / kernel_us / 1e3:>10.0f}", file=out)
                del sets


def mixed_lengths(setup: Setup, out) -> None:
    """Batches whose rows hold 20-100 % of the bucket (prompts of 60-300 s in one batch): the kernel told each
    row's last slot, each row split by its own length (the default) and by the bucket's (one chunk for every
    row), against the kernel reading the whole bucket (the mask alone hides the rest)."""
    length = setup.lengths[-1]
    for batch in setup.batches:
        sets = []
        for seed, (query, key, value, mask) in enumerate(input_sets(setup, batch, length, False)):
            generator = torch.Generator(setup.device).manual_seed(1000 + seed)
            ends = torch.randint(length // 5, length + 1, (batch,), generator=generator, device=setup.device)
            visible = mask & (torch.arange(length, device=setup.device) < ends.view(-1, 1, 1, 1))
            sets.append((query, key, value, visible, ends - 1))
        bucket_chunk = fused.split_sizes(batch, setup.kv_heads, length, fused._processors(sets[0][0].device))[1]
        own_us = time_per_call(setup, lambda q, k, v, m, last, scaling: fused.flash_decode(q, k, v, m, scaling, last), sets)
        by_bucket_us = time_per_call(
            setup, lambda q, k, v, m, last, scaling: fused.flash_decode(q, k, v, m, scaling, last, chunk=bucket_chunk), sets)
        bucket_us = time_per_call(setup, lambda q, k, v, m, last, scaling: fused.flash_decode(q, k, v, m, scaling), sets)
        print(f"3b. mixed lengths (batch {batch}, rows ending at 20-100 % of {length} slots): each row's own slots "
              f"{own_us:.1f} us split by its own length, {by_bucket_us:.1f} us split by the bucket's "
              f"({by_bucket_us / own_us:.2f}x); the whole bucket {bucket_us:.1f} us ({bucket_us / own_us:.2f}x)", file=out)
        del sets


def sweep(setup: Setup, out, deadline: float) -> None:
    print("4. sweep (per-row masks): microseconds per call; * = default launch", file=out)
    print(f"{'batch':>5} {'slots':>6} {'block':>5} {'warps':>5} {'stages':>6} {'splits x slots':>15} {'us':>8}", file=out)
    for batch in setup.batches:
        for length in setup.lengths:
            sets = input_sets(setup, batch, length, False)
            processors = fused._processors(sets[0][0].device)
            block_used = fused.default_block(batch, setup.kv_heads, processors)
            stages_used = fused.default_stages(sets[0][0], block_used)
            settings = [(block, warps, stages, None) for block in (32, 64, 128) for warps in (4, 8) for stages in (2, 3)]
            tiles = fused.split_sizes(batch, setup.kv_heads, length, processors)[1] // block_used
            chunks = {}  # split count -> the fewest slots per split that give it
            for t in (max(1, tiles // 2), 2 * tiles, 4 * tiles):
                chunks.setdefault(-(-length // (t * block_used)), t * block_used)
            chunks.pop(-(-length // (tiles * block_used)), None)  # the default's split count
            settings += [(block_used, fused.WARPS, stages_used, chunk) for chunk in chunks.values()]
            for block, warps, stages, chunk_override in settings:
                if time.monotonic() > deadline:
                    print("   stopped: the run reached --budget seconds", file=out)
                    return
                chunk_used = chunk_override or fused.split_sizes(batch, setup.kv_heads, length, processors, block)[1]

                def launch(q, k, v, m, scaling, block=block, warps=warps, stages=stages, chunk=chunk_used):
                    return fused.flash_decode(q, k, v, m, scaling, chunk=chunk, block=block, warps=warps, stages=stages)

                try:
                    us = f"{time_per_call(setup, launch, sets):>8.1f}"
                except Exception as error:  # e.g. large tiles and many stages beyond shared memory: say so, go on
                    us = f"{type(error).__name__:>8}"
                default = (block, warps, stages, chunk_override) == (block_used, fused.WARPS, stages_used, None)
                print(f"{batch:>5} {length:>6} {block:>5} {warps:>5} {stages:>6} "
                      f"{-(-length // chunk_used):>6} x {chunk_used:<6} {us}{' *' if default else ''}", file=out)
            del sets


def main(argv=None, out=None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="small shapes on the CPU (needs TRITON_INTERPRET=1)")
    parser.add_argument("--no-sweep", dest="sweep", action="store_false", help="skip the sweep of launch settings")
    parser.add_argument("--budget", type=float, default=90.0, help="seconds after which the sweep stops")
    parser.add_argument("--batches", help="comma-separated batch sizes (default: 1,16; 64 rows take ~30 GB of input "
                        "sets at 7,700 slots)")
    parser.add_argument("--lengths", help="comma-separated cache lengths in slots (default: 900,7700; the last is the "
                        "one capture and mixed lengths use)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    if fused.triton is None:
        print("Triton is not importable: nothing to check.", file=out)
        return 1
    if not args.tiny and not torch.cuda.is_available():
        print("No CUDA device: run on a GPU, or with --tiny under TRITON_INTERPRET=1.", file=out)
        return 1
    setup = TINY if args.tiny else gpu_setup()
    if args.batches:
        setup = setup._replace(batches=tuple(int(size) for size in args.batches.split(",")))
    if args.lengths:
        setup = setup._replace(lengths=tuple(int(slots) for slots in args.lengths.split(",")))
    device = torch.cuda.get_device_name() if setup.graphs else "cpu (Triton interpreter)"
    print(f"{device}, torch {torch.__version__}, triton {fused.triton.__version__}", file=out)
    compiled_matmul = torch.compile(fused.matmul_attention, dynamic=True, backend="inductor" if setup.graphs else "eager")
    ok = accuracy(setup, out)
    print(f"   ({time.monotonic() - start:.0f} s)", file=out)
    ok &= capture(setup, compiled_matmul, out)
    print(f"   ({time.monotonic() - start:.0f} s)", file=out)
    speed(setup, compiled_matmul, out)
    mixed_lengths(setup, out)
    print(f"   ({time.monotonic() - start:.0f} s)", file=out)
    if args.sweep:
        sweep(setup, out, start + args.budget)
    print(f"{'ok' if ok else 'FAILED'} ({time.monotonic() - start:.0f} s)", file=out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # every finished line survives a run cut short
    sys.exit(main())
