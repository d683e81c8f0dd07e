"""Does a large-batch decode step gain from overlapping its matrix products with its attention? (issue 28, item 4)

    python3 overlap_experiment.py [--rows 1400,700] [--layers 8] [--length 800]

A stand-in for the 7B thinker's layers >= K at FastV 0.9 (hidden 3584, 28 query heads, 4 key-value heads of 128,
MLP 18944; ``--length`` kept entries per row in a bucket of the next multiple of 256): per layer, the q/k/v
projection, kvprune's decode attention (``kvprune::decode_attention``: the engine's Triton kernel), the output
projection and the gated MLP (norms, rotary and cache writes left out: they are < 10% of the step). Every variant
is captured as one CUDA graph and replayed, as the engine replays its step:

* ``linear only`` / ``attention only``: the two bounds' parts, measured (``sum`` = both one after the other);
* ``one stream``: the whole batch, layer after layer (what the engine does today);
* ``two streams, free``: two half batches on two streams, the second started after the first's first projection;
* ``two streams, phased``: the same, with each half's projection of layer j waiting for the other's attention of
  layer j-1 (so one half's products run beside the other's attention).

and, with ``--green``, launched eagerly (green contexts are not captured here), against ``one stream`` launched
eagerly too:

* ``green contexts, N SMs for attention``: the device split into two green contexts (``torch.cuda.green_contexts``),
  N multiprocessors for attention and the rest for the products; the two halves in a software pipeline, one half's
  products beside the other half's attention, event by event.

Prints one line per variant (ms per step, and against ``sum`` and max(linear, attention)).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from kvprune.generation.decode_attention import fused_decode_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from check_decode_attention import graphed  # noqa: E402  (the repository's scripts are not a package)

HIDDEN, HEADS, KV_HEADS, DIM, MLP = 3584, 28, 4, 128, 18944


class Half:
    """One set of rows: its inputs, caches and the layers' work on them, launch by launch."""

    def __init__(self, rows: int, layers: list[dict], length: int, capacity: int):
        self.rows, self.layers = rows, layers
        self.x = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.1
        self.keys = [torch.randn(rows, KV_HEADS, capacity, DIM, device="cuda", dtype=torch.bfloat16) for _ in layers]
        self.values = [torch.randn_like(k) for k in self.keys]
        self.mask = torch.zeros(rows, 1, 1, capacity, dtype=torch.bool, device="cuda")
        self.mask[..., :length] = True
        self.last = torch.full((rows,), length - 1, dtype=torch.long, device="cuda")
        self.h = self.x.clone()
        self.attn = None

    def projection(self, j: int) -> None:
        self.qkv = self.h @ self.layers[j]["qkv"]

    def attention(self, j: int) -> None:
        q = self.qkv[:, :HIDDEN].view(self.rows, HEADS, 1, DIM)
        self.attn = fused_decode_attention(q, self.keys[j], self.values[j], self.mask, DIM ** -0.5, self.last)

    def rest(self, j: int) -> None:
        w = self.layers[j]
        self.h = self.h + self.attn.view(self.rows, HIDDEN) @ w["o"]
        gate, up = (self.h @ w["gate_up"]).chunk(2, dim=-1)
        self.h = self.h + (F.silu(gate) * up) @ w["down"]

    def reset(self) -> None:
        self.h.copy_(self.x)

    def all_layers(self) -> None:
        """Every layer, one after the other, on the current stream (what the engine does today)."""
        self.reset()
        for j in range(len(self.layers)):
            self.projection(j)
            self.attention(j)
            self.rest(j)


def halves(rows: int, count: int, length: int) -> tuple[Half, Half, Half]:
    """The whole batch and its two halves, each with caches of ``length`` entries per row in a bucket."""
    capacity = -(-(length + 64) // 256) * 256
    layers = layer_weights(count)
    return Half(rows, layers, length, capacity), Half(rows // 2, layers, length, capacity), Half(rows - rows // 2, layers, length, capacity)


def layer_weights(count: int) -> list[dict]:
    def w(i, o):
        return torch.randn(i, o, device="cuda", dtype=torch.bfloat16) * i ** -0.5
    return [dict(qkv=w(HIDDEN, HIDDEN + 2 * KV_HEADS * DIM), o=w(HIDDEN, HIDDEN), gate_up=w(HIDDEN, 2 * MLP),
                 down=w(MLP, HIDDEN)) for _ in range(count)]


def timed(fn, replays: int = 20) -> float:
    """ms per replay of ``fn`` captured as one CUDA graph (after a warm-up on a side stream)."""
    graph, _ = graphed(fn)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays


def eager_timed(fn, repeats: int = 10) -> float:
    """ms per call of ``fn`` launched eagerly (median of ``repeats`` after a warm-up call)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def green_stream(sms: int) -> torch.cuda.Stream:
    """A stream on a green context of ``sms`` multiprocessors (kept alive with the stream)."""
    from torch.cuda.green_contexts import GreenContext

    context = GreenContext.create(num_sms=sms, device_id=torch.cuda.current_device())
    if hasattr(context, "Stream"):
        stream = context.Stream()
    else:  # older API: the context's streams are made while it is current
        context.set_context()
        stream = torch.cuda.Stream()
        context.pop_context()
    stream.context = context
    return stream


def pipelined(a: Half, b: Half, count: int, linear: torch.cuda.Stream, attention: torch.cuda.Stream):
    """One half's products on ``linear`` beside the other half's attention on ``attention``."""
    def fn():
        main = torch.cuda.current_stream()
        linear.wait_stream(main)
        attention.wait_stream(main)
        a.reset(), b.reset()

        def on(stream, work, after=None):
            if after is not None:
                stream.wait_event(after)
            with torch.cuda.stream(stream):
                work()
            done = torch.cuda.Event()
            done.record(stream)
            return done

        projected_a = on(linear, lambda: a.projection(0))
        for j in range(count):
            attended_a = on(attention, lambda: a.attention(j), projected_a)
            if j == 0:
                projected_b = on(linear, lambda: b.projection(0))
            else:
                projected_b = on(linear, lambda: (b.rest(j - 1), b.projection(j)), attended_b)
            attended_b = on(attention, lambda: b.attention(j), projected_b)
            projected_a = on(linear, lambda: (a.rest(j), a.projection(j + 1) if j + 1 < count else None), attended_a)
        on(linear, lambda: b.rest(count - 1), attended_b)
        main.wait_stream(linear)
        main.wait_stream(attention)
    return fn


def run_green(rows: int, count: int, length: int, splits: list[int]) -> list[str]:
    whole, a, b = halves(rows, count, length)
    processors = torch.cuda.get_device_properties(0).multi_processor_count
    results = {"one stream, eager": eager_timed(whole.all_layers)}
    plain = torch.cuda.Stream(), torch.cuda.Stream()
    results["two streams pipelined, eager (no partition)"] = eager_timed(pipelined(a, b, count, *plain))
    for sms in splits:
        streams = green_stream(processors - sms), green_stream(sms)
        results[f"green contexts, {sms} SMs for attention"] = eager_timed(pipelined(a, b, count, *streams))
    base = results["one stream, eager"]
    lines = [f"## {rows} rows, {count} layers, {length} entries per row, launched eagerly ({processors} SMs)", "",
             "| variant | ms per step | / one stream |", "|---|---|---|"]
    lines += [f"| {name} | {ms:.3f} | {ms / base:.3f} |" for name, ms in results.items()]
    return lines + [""]


def run(rows: int, count: int, length: int) -> list[str]:
    whole, a, b = halves(rows, count, length)
    capacity = whole.keys[0].shape[2]
    for half in (whole, a, b):  # attention-only runs read a projection made once
        half.projection(0)
        half.attention(0)

    def linear_only():
        for j in range(count):
            whole.projection(j)
            whole.rest(j)

    def attention_only():
        for j in range(count):
            whole.attention(j)

    def two_streams(phased: bool):
        def fn():
            main = torch.cuda.current_stream()
            sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
            sa.wait_stream(main)
            sb.wait_stream(main)
            a.reset(), b.reset()
            started = torch.cuda.Event()
            attended_a = [torch.cuda.Event() for _ in range(count)]
            attended_b = [torch.cuda.Event() for _ in range(count)]
            with torch.cuda.stream(sa):
                a.projection(0)
                started.record()
            sb.wait_event(started)
            for j in range(count):  # queued in program order; each stream's own order is kept
                with torch.cuda.stream(sa):
                    if j and phased:
                        sa.wait_event(attended_b[j - 1])
                    if j:
                        a.projection(j)
                    a.attention(j)
                    attended_a[j].record()
                    a.rest(j)
                with torch.cuda.stream(sb):
                    if phased:
                        sb.wait_event(attended_a[j])
                    b.projection(j)
                    b.attention(j)
                    attended_b[j].record()
                    b.rest(j)
            main.wait_stream(sa)
            main.wait_stream(sb)
        return fn

    lin, att = timed(linear_only), timed(attention_only)
    results = {"linear only": lin, "attention only": att, "one stream": timed(whole.all_layers),
               "two streams, free": timed(two_streams(False)), "two streams, phased": timed(two_streams(True))}
    bound = max(lin, att)
    lines = [f"## {rows} rows, {count} layers, {length} entries per row (bucket {capacity})", "",
             "| variant | ms per step | / (linear + attention) | / max(linear, attention) |", "|---|---|---|---|"]
    for name, ms in results.items():
        lines.append(f"| {name} | {ms:.3f} | {ms / (lin + att):.3f} | {ms / bound:.3f} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1400,700")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--length", type=int, default=800)
    parser.add_argument("--green", default="", help="SMs for attention to try in green contexts, e.g. 16,24,32,48")
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    for rows in map(int, args.rows.split(",")):
        if args.green:
            print("\n".join(run_green(rows, args.layers, args.length, [int(n) for n in args.green.split(",")])))
        else:
            print("\n".join(run(rows, args.layers, args.length)))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
