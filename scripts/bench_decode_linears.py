"""The decode step's linear layers per row count: cuBLAS (``F.linear`` per weight) against kvprune's Triton
kernels (``kvprune.generation.gemv.grouped_linear``: one row on the matrix-vector kernel, more on the tile
kernel), the figures behind ``gemv.MAX_ROWS``.

    python scripts/bench_decode_linears.py --out "$OUT"                 # one GPU, 7B shape, about 70 s
    python scripts/bench_decode_linears.py --tiny --out /tmp/linears    # a tiny shape on the CPU, seconds

One decode step's linear layers at a preset's text shape (``--preset``: a decoder with separate q, k and v
projections, Qwen2 or Llama style; random weights in bf16): per layer q, k and v (with Qwen2's biases) in one
call, o, gate and up in one call (the compiled step fuses that call with the activation, ``gemv.gated_linear``: the same
kernel with one output; here the products alone), down; then the LM head. Each layer has weights of its own, so every weight is read from memory as in the step. Per row count
and variant, the layers run once (the kernels autotune), then are captured in one CUDA graph and replayed
``--repeats`` times (the bench's ``Meter``: CUDA events, the median); ``TB/s`` is the weights' bytes over that time, and the largest
difference from float32 over one layer of each kind is given relative to its largest value. On the CPU
(``--tiny``) the operator takes ``F.linear`` and the steps run as written: the script's own check, no timing
worth reading. ``gemv.MAX_ROWS`` is lifted to the largest ``--rows`` so the kernels take every row count.
Writes linears.json and linears.md to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from kvprune.generation import gemv
from kvprune.harness.bench.measure import Meter
from kvprune.harness.bench.presets import PRESETS

ROWS = (1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 96, 128)


def layer_weights(text, device, dtype) -> dict:
    """One decoder layer's linear weights and biases, grouped as the decode step calls them."""
    hidden, inner = text.hidden_size, text.intermediate_size
    head_dim = getattr(text, "head_dim", None) or hidden // text.num_attention_heads
    q_out, kv_out = text.num_attention_heads * head_dim, text.num_key_value_heads * head_dim
    bias = getattr(text, "attention_bias", text.model_type.startswith("qwen2"))  # Qwen2's q, k and v carry biases

    def tensor(*shape):
        return torch.randn(*shape, device=device, dtype=dtype) * 0.02

    return dict(qkv=([tensor(q_out, hidden), tensor(kv_out, hidden), tensor(kv_out, hidden)],
                     [tensor(n) if bias else None for n in (q_out, kv_out, kv_out)]),
                o=([tensor(hidden, q_out)], [None]), gate_up=([tensor(inner, hidden), tensor(inner, hidden)], [None, None]),
                down=([tensor(hidden, inner)], [None]))


def cublas(x, weights, biases):
    return [F.linear(x, w, b) for w, b in zip(weights, biases)]


def kvprune_kernels(x, weights, biases):
    return gemv.grouped_linear(x, weights, biases)


VARIANTS = dict(cublas=cublas, kvprune=kvprune_kernels)


def run_step(fn, layers, head, inputs: dict) -> None:
    """Every group of the step, each on the input of its width (``inputs``: width -> (rows, width))."""
    for group in [*(group for layer in layers for group in layer.values()), head]:
        fn(inputs[group[0][0].shape[1]], *group)


def largest_error(fn, layer, inputs: dict) -> float:
    error = 0.0
    for weights, biases in layer.values():
        x = inputs[weights[0].shape[1]]
        for y, w, b in zip(fn(x, weights, biases), weights, biases):
            expected = F.linear(x.float(), w.float(), None if b is None else b.float())
            error = max(error, float((y.float() - expected).abs().max() / expected.abs().max()))
    return error


def time_step_ms(meter: Meter, step) -> float:
    """The step's median time (``meter``): on CUDA one CUDA graph of it replayed, after one run in which the
    kernels autotune; on the CPU the step as written."""
    step()
    if not meter.cuda:
        return meter.median_ms(step)
    meter.sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return meter.median_ms(graph.replay)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--preset", default="qwen2.5-omni-7b", help="the text shape (a bench preset's name)")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="row counts (batch x tokens), comma-separated")
    parser.add_argument("--repeats", type=int, default=9, help="graph replays per figure (the median)")
    parser.add_argument("--tiny", action="store_true", help="the tiny-omni preset on the CPU in float32")
    args = parser.parse_args(argv)
    preset = PRESETS.get("tiny-omni" if args.tiny else args.preset)
    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    rows_list = [int(r) for r in args.rows.split(",")]
    meter = Meter(device, warmup=0, repeats=args.repeats)
    gemv.MAX_ROWS = max(rows_list)
    torch.manual_seed(0)
    text = preset.config().get_text_config()
    layers = [layer_weights(text, device, dtype) for _ in range(text.num_hidden_layers)]
    head = ([torch.randn(text.vocab_size, text.hidden_size, device=device, dtype=dtype) * 0.02], [None])
    weight_bytes = sum(w.numel() * w.element_size() for layer in layers for ws, _ in layer.values() for w in ws)
    weight_bytes += head[0][0].numel() * head[0][0].element_size()
    results = []
    for rows in rows_list:
        widths = {weights[0].shape[1] for weights, _ in layers[0].values()}
        inputs = {width: torch.randn(rows, width, device=device, dtype=dtype) for width in widths}
        for name, fn in VARIANTS.items():
            ms = time_step_ms(meter, partial(run_step, fn, layers, head, inputs))
            results.append(dict(rows=rows, variant=name, ms=ms, tb_s=weight_bytes / ms / 1e9,
                                max_rel_err=largest_error(fn, layers[0], inputs)))
            print(json.dumps(results[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "linears.json").write_text(json.dumps(dict(preset=preset.name, device=str(device), weight_bytes=weight_bytes,
                                                           results=results), indent=1))
    by = {(r["rows"], r["variant"]): r for r in results}
    lines = [f"# Decode linear layers, {preset.name} ({weight_bytes / 1e9:.2f} GB), "
             f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}", "",
             "| rows | cuBLAS ms (TB/s) | kvprune ms (TB/s) | kvprune / cuBLAS |", "|---|---|---|---|"]
    for rows in rows_list:
        c, k = by[rows, "cublas"], by[rows, "kvprune"]
        lines.append(f"| {rows} | {c['ms']:.2f} ({c['tb_s']:.2f}) | {k['ms']:.2f} ({k['tb_s']:.2f}) | {k['ms'] / c['ms']:.2f} |")
    (args.out / "linears.md").write_text("\n".join(lines) + "\n")
    return results


if __name__ == "__main__":
    main()
