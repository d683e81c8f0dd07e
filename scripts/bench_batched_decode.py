"""Batched decoding against its bounds, and batches of mixed lengths.

    python scripts/bench_batched_decode.py --out "$OUT"              # one GPU: 7B Omni thinker shape, 300 s prompts
    python scripts/bench_batched_decode.py --tiny --out /tmp/decode  # tiny Omni thinker on the CPU (a smoke test)

1. The card's two rates, measured here: bf16 matrix products (a large square GEMM) and device copy bandwidth
   (bytes read plus written by a large copy).
2. Decode steps at large batches (FastV 0.9 and unpruned; every row the same prompt, prefilled once): ms per
   step beside its two bounds, the step's matrix FLOPs (linear layers and head: 2 x weights x rows; attention:
   4 x heads x head_dim x entries) at the GEMM rate, and its bytes (the decoder's weights once, every row's
   keys and values once) at the copy rate.
3. Mixed lengths: prompts of 60-300 s in batches of 16, in an order that mixes lengths and sorted by length;
   the decoding's seconds (same rows, same tokens) of the two orders.
Writes decode.csv and decode.md to --out as it goes; stops starting new measurements after --minutes.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

import torch

from kvprune import FastVPress, Generator, fast_audio_encoder, resolve_family
from kvprune.harness.bench.measure import Meter
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.bench.roofline import copy_tb_s, decode_step_work, gemm_tflops
from kvprune.harness.markdown import markdown_table


def step_row(generator: Generator, inputs: list[dict], press, new_tokens: int, repeats: int, rates: dict, audio_token: int) -> dict:
    suppress = [audio_token]
    kwargs = dict(max_new_tokens=new_tokens, press=press, suppress_tokens=suppress, eos_token_id=[])
    generator.generate(inputs, **kwargs)  # compiles and captures
    runs = [generator.generate(inputs, **kwargs) for _ in range(repeats)]
    out = runs[-1]
    step_s = statistics.median(r.timing.decode_s / (r.timing.new_tokens - 1) for r in runs)
    rows = out.new_tokens.shape[0]
    flops, bytes_ = decode_step_work(generator.model, rows, out.timing.kv_held_bytes)
    matmul_ms, bytes_ms = 1000 * flops / rates["gemm_flops"], 1000 * bytes_ / rates["copy_bytes"]
    return dict(rows=rows, step_ms=round(1000 * step_s, 3), tokens_per_s=round(rows / step_s),
                matmul_bound_ms=round(matmul_ms, 3), bytes_bound_ms=round(bytes_ms, 3),
                over_max_bound=round(1000 * step_s / max(matmul_ms, bytes_ms), 3),
                over_sum_of_bounds=round(1000 * step_s / (matmul_ms + bytes_ms), 3),
                kv_gib=round(out.timing.kv_held_bytes / 2**30, 2), compiled=out.step_compiled)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--minutes", type=float, default=6.0)
    parser.add_argument("--new-tokens", type=int, default=33)
    parser.add_argument("--plan", default="fastv:640,fastv:256,none:128",
                        help="press:rows,... of the step measurements (prompts of 16 rows each prefilled once)")
    parser.add_argument("--no-mixed", dest="mixed", action="store_false", help="skip the mixed-lengths measurement")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + 60 * args.minutes
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    preset = PRESETS.get("tiny-omni" if args.tiny else "qwen2.5-omni-7b")
    seconds, low = (4.0, 1.0) if args.tiny else (300.0, 60.0)
    # (press, rows, prompt rows per prefilled batch)
    per_batch = 2 if args.tiny else 16
    plan = [(press, int(rows), per_batch) for press, rows in (item.split(":") for item in
                                                                ("fastv:8,none:4" if args.tiny else args.plan).split(","))]
    mixed_rows = 8 if args.tiny else 16
    args.out.mkdir(parents=True, exist_ok=True)
    rows_out: list[dict] = []

    def write(row: dict) -> None:
        rows_out.append(row)
        print(row, flush=True)
        fields = list(dict.fromkeys(k for r in rows_out for k in r))
        with open(args.out / "decode.csv", "w", newline="") as file:
            writer = csv.DictWriter(file, fields)
            writer.writeheader()
            writer.writerows(rows_out)
        (args.out / "decode.md").write_text(f"# Batched decoding against its bounds ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, "
                                           f"torch {torch.__version__})\n\n" + markdown_table(fields, ([str(r.get(f, '')) for f in fields] for r in rows_out)) + "\n")

    meter = Meter(device, 0, 1)
    rates = dict(gemm_flops=1e12 * gemm_tflops(meter, torch.bfloat16 if device.type == "cuda" else torch.float32),
                 copy_bytes=1e12 * copy_tb_s(meter))
    write(dict(kind="card", gemm_tflops=round(rates["gemm_flops"] / 1e12, 1), copy_tb_s=round(rates["copy_bytes"] / 1e12, 3)))
    model = preset.build(device, dtype, "sdpa")
    fast_audio_encoder(model)
    audio_token = resolve_family(model).audio_token_id(model)
    presses = {"fastv": FastVPress(layer=2, ratio=0.9), "none": None}
    for name, rows, per_batch in plan:
        prompt = preset.prompt(model, seconds, 0, batch=per_batch).inputs
        if time.monotonic() > deadline:
            write(dict(kind="skipped", press=name, rows=rows, reason="--minutes reached"))
            continue
        generator = Generator(model)
        try:
            row = step_row(generator, [prompt] * (rows // per_batch), presses[name], args.new_tokens, 2, rates, audio_token)
            write(dict(kind="step", press=name, **row))
        except Exception as error:  # one failure (e.g. out of memory) must not lose the other rows
            write(dict(kind="error", press=name, rows=rows, reason=f"{type(error).__name__}: {str(error)[:200]}"))
        finally:
            generator = None
            torch.cuda.empty_cache() if device.type == "cuda" else None
    # mixed lengths: 2 batches of prompts from `low` to `seconds`, mixed (alternating) or sorted
    lengths = [low + (seconds - low) * i / (2 * mixed_rows - 1) for i in range(2 * mixed_rows)]
    prompts = {s: preset.prompt(model, s, 0, seed=i).inputs for i, s in enumerate(lengths)}
    orders = {"mixed": lengths[0::2] + lengths[1::2], "sorted": lengths}
    for name in ("fastv", "none") if args.mixed else ():
        generator = Generator(model)
        for order, seq in orders.items():
            if time.monotonic() > deadline:
                break
            batches = [[prompts[s] for s in seq[i : i + mixed_rows]] for i in range(0, len(seq), mixed_rows)]
            kwargs = dict(max_new_tokens=args.new_tokens, press=presses[name], suppress_tokens=[audio_token], eos_token_id=[])
            for batch in batches:
                generator.generate(batch, **kwargs)  # compile/capture every state shape first
            decode = [sum(generator.generate(batch, **kwargs).timing.decode_s for batch in batches) for _ in range(2)]
            write(dict(kind="mixed", press=name, order=order, rows=len(seq), batch=mixed_rows,
                       decode_s=round(statistics.median(decode), 4)))
        generator = None


if __name__ == "__main__":
    main()
