"""What the engine's decode-step compilation costs a process that runs unpruned, then a token press: with the
unpruned caches split at the press's K (``Generator.split_unpruned_at``, the default) and without (one group of
layers: a grouping, so a compilation, of its own).

    python scripts/time_decode_compilation.py --preset tiny-aero --layers 28          # CPU, Inductor, ~5 minutes
    python scripts/time_decode_compilation.py --preset qwen2.5-omni-3b --device cuda  # one GPU, the real shape

Each way runs in a fresh process with an empty Inductor cache (``TORCHINDUCTOR_CACHE_DIR``), so that neither
reuses the other's compiled kernels: the first call (unpruned) and the second (FastV at 0.5, K = ``--layer``)
are timed whole, with the compilations each made. The tokens of each call are checked against the same call
uncompiled (on the CPU). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from kvprune import FastVPress, Generator
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.estimate.timing import synchronise
from kvprune.harness.markdown import markdown_table


def _child(args) -> dict:
    """One way, in this process: the two calls timed."""
    torch.set_num_threads(args.threads)
    preset = PRESETS.get(args.preset)
    device = torch.device(args.device)
    config = preset.config()
    text = config.get_text_config()
    if args.layers:
        text.num_hidden_layers = args.layers
        if getattr(text, "layer_types", None):
            text.layer_types = [text.layer_types[0]] * args.layers
    torch.manual_seed(0)
    with torch.device(device):
        model = preset.family.build(config, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32,
                                    attn_implementation="sdpa").eval()
    prompt = preset.prompt(model, args.seconds, 1)
    generator = Generator(model, compile=True, split_unpruned_at=args.layer if args.split else None)
    eager = Generator(model, compile=False) if device.type == "cpu" else None
    calls = {}
    for name, press in (("unpruned", None), ("fastv 0.5", FastVPress(layer=args.layer, ratio=0.5))):
        synchronise(device)
        start = time.perf_counter()
        out = generator.generate(prompt.inputs, max_new_tokens=args.new_tokens, press=press, eos_token_id=[])
        synchronise(device)
        seconds = time.perf_counter() - start  # the uncompiled reference below is not timed
        same = None if eager is None else bool(torch.equal(
            out.new_tokens, eager.generate(prompt.inputs, max_new_tokens=args.new_tokens, press=press, eos_token_id=[]).new_tokens))
        calls[name] = dict(seconds=seconds, compilations=out.compilations, same_tokens=same)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny-aero")
    parser.add_argument("--layers", type=int, default=0, help="the decoder's layers (default: the preset's)")
    parser.add_argument("--layer", type=int, default=2, help="K of the press and of the split")
    parser.add_argument("--seconds", type=float, default=2.0, help="audio seconds of the prompt")
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads (the machine may be shared)")
    parser.add_argument("--child", choices=["split", "one-group"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.split = args.child == "split"
        print(json.dumps(_child(args)))
        return
    rows = []
    for way in ("split", "one-group"):
        with tempfile.TemporaryDirectory(prefix="kvprune-inductor-") as cache:
            command = [sys.executable, __file__, *sys.argv[1:], "--child", way]
            done = subprocess.run(command, env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache), capture_output=True,
                                  text=True, check=True)
        calls = json.loads(done.stdout.strip().splitlines()[-1])
        total = sum(call["seconds"] for call in calls.values())
        rows.append([way, *(f"{call['seconds']:.1f} s ({call['compilations']})" for call in calls.values()), f"{total:.1f} s",
                     ", ".join(_same(call["same_tokens"]) for call in calls.values())])
    layers = args.layers or "the preset's"
    print(f"{args.preset}, {layers} layers, {args.seconds:g} s of audio, {args.device}, K = {args.layer}\n")
    print(markdown_table(["unpruned caches", "unpruned call (compilations)", "FastV 0.5 call (compilations)", "both",
                          "tokens as uncompiled"], rows))


def _same(same: bool | None) -> str:
    """A call's tokens against the uncompiled engine's: compared on a CPU only (on a GPU, bf16 kernels may differ)."""
    return "not compared (GPU)" if same is None else ("equal" if same else "DIFFERENT")


if __name__ == "__main__":
    main()
