"""A third form of issue 28's item 4: the matrix products on fewer multiprocessors (cuBLAS's SM count target,
``torch._C._set_sm_carveout_experimental``), so that the other half batch's attention runs on the ones left.

    python3 carveout_overlap.py [--rows 784,392] [--layers 8] [--length 900]

Uses the stand-in layers of ``docs/bench/h200_2026-11-29b/overlap_experiment.py`` (the 7B's layers >= K at FastV
0.9: q/k/v projection, kvprune's decode attention, output projection, gated MLP), each variant one CUDA graph:

* ``linear only``, ``attention only``, ``one stream``: as there;
* ``linear only, carveout C``: the products captured with C multiprocessors left out (does cuBLAS honour it?);
* ``two streams phased, carveout C``: two half batches on two streams, each half's projection of layer j waiting for
  the other's attention of layer j-1, the products captured with C multiprocessors left out; ``priority``: the
  attention's stream at the higher priority, so its programs take the multiprocessors the products leave.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]  # the repository (this file is docs/bench/<folder>/)
spec = importlib.util.spec_from_file_location("overlap", ROOT / "docs/bench/h200_2026-11-29b/overlap_experiment.py")
overlap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(overlap)


def carved(fn, carveout: int):
    def wrapped():
        before = torch._C._get_sm_carveout_experimental()
        torch._C._set_sm_carveout_experimental(carveout)
        try:
            fn()
        finally:
            torch._C._set_sm_carveout_experimental(before)
    return wrapped


def phased(a, b, count: int, carveout: int, priority: bool):
    """Two halves, one half's products beside the other's attention; products carved out."""
    def fn():
        main = torch.cuda.current_stream()
        sa = torch.cuda.Stream(priority=0)
        sb = torch.cuda.Stream(priority=0)
        sa.wait_stream(main)
        sb.wait_stream(main)
        a.reset(), b.reset()
        attended_a = [torch.cuda.Event() for _ in range(count)]
        attended_b = [torch.cuda.Event() for _ in range(count)]
        started = torch.cuda.Event()
        with torch.cuda.stream(sa):
            carved(lambda: a.projection(0), carveout)()
            started.record()
        sb.wait_event(started)
        for j in range(count):
            with torch.cuda.stream(sa):
                if j:
                    sa.wait_event(attended_b[j - 1])
                    carved(lambda: a.projection(j), carveout)()
                a.attention(j)
                attended_a[j].record()
                carved(lambda: a.rest(j), carveout)()
            with torch.cuda.stream(sb):
                sb.wait_event(attended_a[j])
                carved(lambda: b.projection(j), carveout)()
                b.attention(j)
                attended_b[j].record()
                carved(lambda: b.rest(j), carveout)()
        main.wait_stream(sa)
        main.wait_stream(sb)
    return fn


def split_streams(a, b, count: int, carveout: int):
    """Products of both halves on one stream (carved out), attention of both on a high-priority stream, in a
    software pipeline: a's attention j beside b's products, b's attention j beside a's products of layer j+1."""
    def fn():
        main = torch.cuda.current_stream()
        linear = torch.cuda.Stream(priority=0)
        attention = torch.cuda.Stream(priority=-1)
        linear.wait_stream(main)
        attention.wait_stream(main)
        a.reset(), b.reset()

        def on(stream, work, after=None, carve=False):
            if after is not None:
                stream.wait_event(after)
            with torch.cuda.stream(stream):
                (carved(work, carveout) if carve else work)()
            done = torch.cuda.Event()
            done.record(stream)
            return done

        projected_a = on(linear, lambda: a.projection(0), carve=True)
        attended_b = None
        for j in range(count):
            attended_a = on(attention, lambda: a.attention(j), projected_a)
            if j == 0:
                projected_b = on(linear, lambda: b.projection(0), carve=True)
            else:
                projected_b = on(linear, lambda: (b.rest(j - 1), b.projection(j)), attended_b, carve=True)
            attended_b = on(attention, lambda: b.attention(j), projected_b)
            projected_a = on(linear, lambda: (a.rest(j), a.projection(j + 1) if j + 1 < count else None), attended_a,
                             carve=True)
        on(linear, lambda: b.rest(count - 1), attended_b, carve=True)
        main.wait_stream(linear)
        main.wait_stream(attention)
    return fn


def run(rows: int, count: int, length: int, carveouts: list[int]) -> list[str]:
    whole, a, b = overlap.halves(rows, count, length)
    for half in (whole, a, b):
        half.projection(0)
        half.attention(0)

    def linear_only():
        for j in range(count):
            whole.projection(j)
            whole.rest(j)

    def attention_only():
        for j in range(count):
            whole.attention(j)

    lin, att = overlap.timed(linear_only), overlap.timed(attention_only)
    results = {"linear only": lin, "attention only": att, "one stream": overlap.timed(whole.all_layers)}
    for c in carveouts:
        results[f"linear only, carveout {c}"] = overlap.timed(carved(linear_only, c))
    for c in [0] + carveouts:
        results[f"two streams phased, carveout {c}"] = overlap.timed(phased(a, b, count, c, False))
        results[f"pipeline, attention stream high priority, carveout {c}"] = overlap.timed(split_streams(a, b, count, c))
    bound = max(lin, att)
    one = results["one stream"]
    lines = [f"## {rows} rows, {count} layers, {length} entries per row", "",
             "| variant | ms per step | / one stream | / max(linear, attention) |", "|---|---|---|---|"]
    lines += [f"| {name} | {ms:.3f} | {ms / one:.3f} | {ms / bound:.3f} |" for name, ms in results.items()]
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="784,392")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--length", type=int, default=900)
    parser.add_argument("--carveouts", default="16,32,48,66")
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs\n", flush=True)
    for rows in map(int, args.rows.split(",")):
        print("\n".join(run(rows, args.layers, args.length, [int(c) for c in args.carveouts.split(",")])), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
