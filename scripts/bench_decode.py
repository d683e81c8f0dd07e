"""Decode speed through ``generate``: the dynamic cache against the static cache (compiled), unpruned and pruned.

    python scripts/bench_decode.py --out results/decode            # one GPU: 7B Omni thinker, 5 min audio, ~4 min
    python scripts/bench_decode.py --tiny --out /tmp/decode        # tiny Omni thinker on the CPU, seconds

One prompt (text, one clip of random audio features, text) on the Qwen2.5-Omni-7B thinker's shape
with random bf16 weights (the ``qwen2.5-omni-7b`` bench preset). Runs, each a whole ``generate``
call of ``--new-tokens`` tokens (greedy, end of sequence suppressed so every run decodes as many):

- ``stock dynamic`` / ``stock static``: no press, HF's dynamic cache / ``cache_implementation="static"``
  (on a GPU, HF compiles the decode step itself: torch.compile, mode reduce-overhead, CUDA graphs);
- ``<press>@<ratio> dynamic`` / ``static``: the same under the press, for each ``--ratios``.

Each run: one untimed call that also returns the logits (on the static cache this call compiles;
compiled code is dropped between static runs, so each gets its own static shapes as HF's first call
does), then ``--repeats`` timed calls, split at the end of the prefill (CUDA events): prefill, decode
ms per token (tokens after the first), whole request. The static runs also give the largest |logit
difference| against the dynamic run of the same press and ratio, over the steps whose tokens so far
agree (bf16: after a near-tie the two may pick different tokens, and later logits are not comparable),
the number of leading tokens that agree, and how many graphs and graph breaks compiling made.
Writes decode.csv and decode.md to --out.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from contextlib import nullcontext
from pathlib import Path

import torch
import transformers
from torch._dynamo.utils import counters

from kvprune import parse_method, resolve_family
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.markdown import markdown_table
from kvprune.generation import stock_generate


def generate_kwargs(model, new_tokens: int, cache: str) -> dict:
    """Greedy, exactly ``new_tokens`` tokens, never the audio placeholder (random weights may pick anything)."""
    kwargs = dict(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    kwargs["suppress_tokens"] = [resolve_family(model).audio_token_id(model)]
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    return kwargs


def untimed(model, inputs: dict, kwargs: dict):
    """One call returning tokens and per-step logits (on the static cache, the one that compiles)."""
    with torch.no_grad():
        out = model.generate(**inputs, **kwargs, output_logits=True, return_dict_in_generate=True)
    return out.sequences[:, inputs["input_ids"].shape[1] :], out.logits


def agreement(tokens, logits, reference_tokens, reference_logits) -> dict:
    """Leading tokens that agree, and the largest |logit difference| over the steps up to the first
    disagreement (the step that disagrees still saw the same tokens, so it is compared too)."""
    same = (tokens[0] == reference_tokens[0]).tolist()
    agree = same.index(False) if False in same else len(same)
    steps = range(min(agree + 1, len(logits)))
    diff = max(float((logits[i].float() - reference_logits[i].float()).abs().max()) for i in steps)
    return dict(tokens_agree=agree, max_logit_diff=round(diff, 5))


def measure(model, inputs: dict, kwargs: dict, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        with torch.no_grad():
            _, timing = stock_generate(model, inputs, **kwargs)
        runs.append(timing)
    decoded = [t.decode_s * 1000 / (t.new_tokens - 1) for t in runs]
    return dict(
        prefill_ms=round(statistics.median(t.prefill_s * 1000 for t in runs), 2),
        decode_ms_per_token=round(statistics.median(decoded), 3),
        request_ms=round(statistics.median((t.prefill_s + t.decode_s) * 1000 for t in runs), 2),
        kv_cache_mib=round(runs[-1].kv_cache_bytes / 2**20, 3),
        new_tokens=runs[-1].new_tokens,
    )


def run(model, inputs: dict, name: str, cache: str, press, new_tokens: int, repeats: int) -> tuple[dict, tuple]:
    """One configuration: its untimed call (tokens, logits) and its timings."""
    kwargs = generate_kwargs(model, new_tokens, cache)
    if cache == "static":
        torch._dynamo.reset()
        counters.clear()
    with press(model) if press is not None else nullcontext():
        tokens, logits = untimed(model, inputs, kwargs)
        row = dict(run=name, cache=cache, **measure(model, inputs, kwargs, repeats))
    if cache == "static":
        row.update(graphs=counters["stats"]["unique_graphs"], graph_breaks=sum(counters["graph_break"].values()))
    return row, (tokens, logits)


def markdown(rows: list[dict], header: str) -> str:
    columns = ["run", "cache", "prefill_ms", "decode_ms_per_token", "request_ms", "kv_cache_mib",
               "tokens_agree", "max_logit_diff", "graphs", "graph_breaks"]
    lines = [header, "", markdown_table(columns, ([str(row.get(c, "")) for c in columns] for row in rows))]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for decode.csv and decode.md")
    parser.add_argument("--tiny", action="store_true", help="the tiny Omni thinker (tiny-omni preset), for a CPU")
    parser.add_argument("--preset", help="bench preset (default qwen2.5-omni-7b; tiny: tiny-omni)")
    parser.add_argument("--audio-seconds", type=float, help="default 300 (tiny: 10)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--method", default="fastv", help="method spec of the press (default fastv)")
    parser.add_argument("--ratios", default="0.5,0.9")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per run (medians)")
    parser.add_argument("--device", help="default: cuda if available")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default: bfloat16 on a GPU")
    parser.add_argument("--attn-implementation", default="sdpa", choices=["sdpa", "eager"])
    args = parser.parse_args(argv)

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    preset = PRESETS.get(args.preset or ("tiny-omni" if args.tiny else "qwen2.5-omni-7b"))
    seconds = args.audio_seconds or (10.0 if args.tiny else 300.0)
    model = preset.build(device, dtype, args.attn_implementation)
    inputs = preset.prompt(model, seconds, decode_tokens=0).inputs
    spec = parse_method(args.method)

    runs = [("stock", None)] + [(f"{spec.label}@{r}", spec.build(float(r))) for r in args.ratios.split(",")]
    rows = []
    for name, press in runs:
        dynamic, reference = run(model, inputs, name, "dynamic", press, args.new_tokens, args.repeats)
        static, compared = run(model, inputs, name, "static", press, args.new_tokens, args.repeats)
        static.update(agreement(*compared, *reference))
        for row in (dynamic, static):
            rows.append(row)
            print(row, flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(args.out / "decode.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    header = (
        f"Decode through generate, {preset.name}, {seconds:g} s of audio ({inputs['input_ids'].shape[1]} prompt tokens), "
        f"{args.new_tokens} new tokens: {device_name}, {str(dtype).removeprefix('torch.')}, {args.attn_implementation}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}; medians of {args.repeats} calls "
        "after one untimed call (on the static cache, the one that compiles)."
    )
    (args.out / "decode.md").write_text(markdown(rows, header))
    print((args.out / "decode.md").read_text())


if __name__ == "__main__":
    main()
