"""Can the step's products and attention overlap if cuBLAS leaves multiprocessors free? (issue 28, item 4)

    python3 carveout_experiment.py [--rows 818] [--layers 8] [--length 842] [--carveouts 24,33,44,56]

The stand-in of ``h200_2026-11-29b/overlap_experiment.py`` (the 7B thinker's layers >= K: q/k/v, kvprune's decode
attention, output projection, gated MLP), there found to gain nothing from two streams: each part fills the
device. Here cuBLASLt is told to leave ``c`` multiprocessors free (``torch._C._set_sm_carveout_experimental``: its
persistent kernels then launch on the rest), and the products' stream gets the higher priority, so the attention's
programs can only take the ``c`` multiprocessors the products leave. Every variant is captured as one CUDA graph:

* ``linear only`` / ``attention only``: the parts, each alone on the whole device;
* ``linear only, carveout c``: the products on ``132 - c`` multiprocessors (whether the carveout takes effect);
* ``attention only on N SMs``: the attention alone in a green context of N multiprocessors, launched eagerly
  (how fast ``N`` multiprocessors read the caches);
* ``one stream``: the whole batch, layer after layer (what the engine does);
* ``pipelined, carveout c[, priority]``: two half batches, one half's products on one stream beside the other
  half's attention on another (``overlap_experiment.pipelined``), the products' cuBLASLt calls with carveout ``c``;
* ``pipelined, green P + c SMs, carveout c``: the same with the two streams in green contexts that split the device
  (the products' ``P = 132 - c``, sized to their carveout; the attention's ``c``), launched eagerly and, where
  green contexts can be captured, as a graph.

Prints one markdown table (ms per step, against the sum and the max of the two parts).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "h200_2026-11-29b"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "h100_2026-12-06f"))
from carveout_overlap import carved  # noqa: E402  (cuBLAS(Lt) told to leave multiprocessors free while it launches)
from overlap_experiment import eager_timed, green_stream, halves, pipelined, timed  # noqa: E402


def each_layer(count: int, *steps):
    """A call running ``steps`` (each taking a layer's index) layer after layer, ``count`` layers."""
    return lambda: [step(j) for j in range(count) for step in steps]


def side_by_side(linear_only, attention_only, processors: int, c: int, seconds: float = 2.0) -> dict:
    """The two parts with no dependence between them, each in its green context (the products' ``processors - c``
    multiprocessors with carveout ``c``, the attention's ``c``), alone and at once, launched eagerly for ``seconds``
    each: whether the card runs both at once at their separate speeds; and the same with a plain copy (6 GiB
    read and written) in the attention's place, so that what slows is not kvprune's kernel alone. Each part is
    also timed on its own stream while the other runs (events), to say which of the two slows. Prints each
    stretch's UTC times, to read against clocks and power sampled by ``nvidia-smi`` beside the run."""
    import time
    from datetime import datetime, timezone

    linear, attention = green_stream(processors - c), green_stream(c)
    source = torch.empty(6 * 1024**3, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    parts = {"linear": (linear, carved(linear_only, c)), "attention": (attention, attention_only),
             "copy": (attention, lambda: target.copy_(source))}

    def launch(names):
        marks = {}
        for name in names:
            stream, fn = parts[name]
            with torch.cuda.stream(stream):
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                fn()
                end.record()
            marks[name] = (begin, end)
        return marks

    results = {}
    for names in (["linear"], ["attention"], ["copy"], ["linear", "attention"], ["linear", "copy"]):
        launch(names)
        torch.cuda.synchronize()
        calls, begun, own = 0, time.perf_counter(), dict.fromkeys(names, 0.0)
        start = datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3]
        while time.perf_counter() - begun < seconds:
            marks = launch(names)
            torch.cuda.synchronize()
            for name, (begin, end) in marks.items():
                own[name] += begin.elapsed_time(end)
            calls += 1
        ms = (time.perf_counter() - begun) * 1000 / calls
        print(f"{' + '.join(names)} in green contexts: {start} to {datetime.now(timezone.utc).strftime('%H:%M:%S.%f')[:-3]} UTC")
        label = f"{' and '.join(names)}, independent, green {processors - c} + {c}, eager"
        results[f"{label} (host-timed)"] = ms
        if len(names) > 1:
            results.update({f"{label}: {name} on its stream" : total / calls for name, total in own.items()})
    return results


def run(rows: int, count: int, length: int, carveouts: list[int], independent: int | None = None) -> list[str]:
    torch.backends.cuda.preferred_blas_library("cublaslt")  # the carveout is a cuBLASLt attribute
    whole, a, b = halves(rows, count, length)
    for half in (whole, a, b):  # attention-only runs read a projection made once
        half.projection(0)
        half.attention(0)

    linear_only, attention_only = each_layer(count, whole.projection, whole.rest), each_layer(count, whole.attention)
    lin, att = timed(linear_only), timed(attention_only)
    results = {"linear only": lin, "attention only": att, "one stream": timed(whole.all_layers)}
    processors = torch.cuda.get_device_properties(0).multi_processor_count
    for c in carveouts:
        results[f"linear only, carveout {c}"] = timed(carved(linear_only, c))
        try:
            stream = green_stream(c)
            def on_green():
                with torch.cuda.stream(stream):
                    attention_only()
                torch.cuda.current_stream().wait_stream(stream)
            results[f"attention only on {c} SMs (green, eager)"] = eager_timed(on_green)
        except Exception as error:  # green contexts are a probe here, not needed by the variants below
            print(f"green context of {c} SMs: {type(error).__name__}: {error}")
    for c in [None] + carveouts:
        for priority in (False, True):
            linear = torch.cuda.Stream(priority=-1 if priority else 0)
            attention = torch.cuda.Stream()
            name = f"pipelined, carveout {c}" + (", priority" if priority else "")
            results[name] = timed(carved(pipelined(a, b, count, linear, attention), c))
    results["pipelined, carveout 44, priority, eager"] = eager_timed(
        carved(pipelined(a, b, count, torch.cuda.Stream(priority=-1), torch.cuda.Stream()), 44))
    for c in carveouts:
        try:
            streams = green_stream(processors - c), green_stream(c)
        except Exception as error:
            print(f"green contexts {processors - c} + {c}: {type(error).__name__}: {error}")
            continue
        split = carved(pipelined(a, b, count, *streams), c)
        results[f"pipelined, green {processors - c} + {c} SMs, carveout {c}, eager"] = eager_timed(split)
        try:
            results[f"pipelined, green {processors - c} + {c} SMs, carveout {c}, graph"] = timed(split)
        except Exception as error:
            print(f"green contexts in a graph: {type(error).__name__}: {error}")
    if independent:
        results.update(side_by_side(linear_only, attention_only, processors, independent))
    bound = max(lin, att)
    lines = [f"## {rows} rows, {count} layers, {length} entries per row ({processors} SMs, cuBLASLt)", "",
             "| variant | ms per step | / (linear + attention) | / max(linear, attention) |", "|---|---|---|---|"]
    lines += [f"| {name} | {ms:.3f} | {ms / (lin + att):.3f} | {ms / bound:.3f} |" for name, ms in results.items()]
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="818")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--length", type=int, default=842)
    parser.add_argument("--carveouts", default="24,33,44,56")
    parser.add_argument("--independent", type=int, default=None,
                        help="also run the two parts side by side with no dependence, the attention on this many SMs")
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    for rows in map(int, args.rows.split(",")):
        print("\n".join(run(rows, args.layers, args.length, [int(c) for c in args.carveouts.split(",")], args.independent)))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
