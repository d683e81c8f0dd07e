"""Check that every press prunes a model split over two devices exactly as it does on one.

    python scripts/check_multi_gpu.py                          # cuda:0 + cuda:1: every family, press, split point, sdpa and eager
    python scripts/check_multi_gpu.py --devices cpu,cpu        # the same code on the CPU, hooks on: a smoke test (the tests run it)
    python scripts/check_multi_gpu.py --families voxtral --presses dart,knorm --splits 2,3 --attn sdpa

For each family's tiny model (its tiny config, random weights, the same seed every time), attention
backend and registered press (token-dropping and cache), ``generate`` runs once on the first device
alone, then once per split point s with the model dispatched by accelerate's ``dispatch_model``
(what ``from_pretrained(device_map=...)`` does): the embeddings, the audio encoder and decoder
layers < s on the first device; layers >= s, the final norm and the LM head on the second (a head
tied to the embeddings stays with them). The generated tokens, the kept positions and the cache
presses' per-layer counts must be identical. A split that fails or differs without any press (the
stock model under accelerate) is reported and left out. Prints one line per family x backend x press
(the split points that differ, if any) and exits with status 1 if any press differs.
"""

from __future__ import annotations

import argparse
import sys
import traceback

import torch
import torch.nn as nn
from accelerate import dispatch_model
from accelerate.hooks import remove_hook_from_submodules

from kvprune import get_press, list_families, list_presses
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.bench.shapes import shapes_of
from kvprune.models import ModelFamily, tiny

ATTENTION = ("sdpa", "eager")
RATIO = 0.5
AUDIO_SECONDS = 2.0
NEW_TOKENS = 4
LARGE_INIT = dict(initializer_range=0.2)  # varied greedy tokens from random weights, as the test suite's tiny models


def build(family: ModelFamily, attn: str) -> nn.Module:
    """The family's tiny model with fixed random weights, on the CPU."""
    text = {"text_config": LARGE_INIT} if "text_config" in family.tiny.kwargs else {}
    torch.manual_seed(0)
    return family.build(family.tiny_config(**LARGE_INIT, **text), attn_implementation=attn).eval()


def split_device_map(model: nn.Module, family: ModelFamily, split: int, first: str, second: str) -> dict[str, str]:
    """A device map for ``dispatch_model``: decoder layers ``split..``, the final norm and the LM head
    on ``second``, everything else on ``first``; module names do not overlap. A head tied to the input
    embeddings stays with them on ``first``, as ``from_pretrained(device_map="auto")`` keeps tied weights."""
    on_second = set(map(id, list(family.layers(model))[split:])) | {id(family.final_norm(model))}
    head = model.get_output_embeddings()
    if head is not None and head.weight is not model.get_input_embeddings().weight:
        on_second.add(id(head))
    device_map: dict[str, str] = {}

    def place(name: str, module: nn.Module) -> None:
        if id(module) in on_second:
            device_map[name] = second
        elif not any(id(m) in on_second for m in module.modules()):
            device_map[name] = first
        else:
            own = [n for n, _ in module.named_parameters(recurse=False)] + [n for n, _ in module.named_buffers(recurse=False)]
            for tensor_name in own:  # a parent's own weights stay on the first device
                device_map[f"{name}.{tensor_name}" if name else tensor_name] = first
            for child_name, child in module.named_children():
                place(f"{name}.{child_name}" if name else child_name, child)

    place("", model)
    return device_map


def generate(model: nn.Module, family: ModelFamily, device: str) -> torch.Tensor:
    """One greedy ``generate`` on the family's tiny prompt, its inputs on ``device``."""
    prompt = PRESETS.get(shapes_of(family).tiny_preset).prompt(model, AUDIO_SECONDS, decode_tokens=1)
    inputs = {name: value.to(device) for name, value in prompt.inputs.items()}
    with torch.no_grad():
        return model.generate(
            **inputs, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=tiny.TEXT["pad_token_id"],
            suppress_tokens=list(tiny.SPECIAL_IDS),
        )


def run(model: nn.Module, family: ModelFamily, press, device: str) -> dict:
    """Tokens, kept positions and per-layer cache counts of one greedy ``generate`` under ``press``."""
    with press(model) as pressed:
        tokens = generate(model, family, device)
    return dict(
        tokens=tokens.cpu().tolist(),
        kept=[p.tolist() for p in pressed.kept_positions],
        layers={j: [(s.audio_tokens, s.kept_tokens) for s in stats] for j, stats in pressed.layer_stats.items()},
    )


def failure(error: Exception, label: str, tracebacks: bool) -> str:
    if tracebacks:
        print(f"--- {label}", file=sys.stderr)
        traceback.print_exc()
    return f"{type(error).__name__}: {error}"


def layer_devices(model: nn.Module, family: ModelFamily) -> list[str]:
    return [str(next(layer.parameters()).device) for layer in family.layers(model)]


def check(families: list[ModelFamily], presses: list[str], attns: list[str], splits: list[int] | None,
          devices: tuple[str, str], out=sys.stdout, tracebacks: bool = False) -> int:
    """Run every comparison; returns the number that differ. With ``tracebacks``, the first failure
    of each family, backend and press prints its traceback to stderr."""
    first, second = devices
    differing = checks = stock_failures = 0
    for family in families:
        for attn in attns:
            reference_model = build(family, attn).to(first)
            n_layers = len(family.layers(reference_model))
            points = [s for s in (splits or range(1, n_layers + 1)) if 1 <= s <= n_layers]
            models = {}
            for split in points:
                model = build(family, attn)
                # as from_pretrained(device_map=...) dispatches; main_device: where the inputs go
                # (accelerate would otherwise pick either device at random)
                device_map = split_device_map(model, family, split, first, second)
                models[split] = dispatch_model(model, device_map, main_device=first, force_hooks=True,
                                               skip_keys=model._skip_keys_device_placement)
                expected = [first] * split + [second] * (n_layers - split)
                if layer_devices(models[split], family) != [str(torch.device(d)) for d in expected]:
                    raise RuntimeError(f"{family.name}: the device map did not split the decoder at layer {split}")
            stock = generate(reference_model, family, first).tolist()
            for split, model in list(models.items()):  # a split the model itself cannot run is not a press's fault
                try:
                    problem = None if generate(model, family, first).tolist() == stock else "tokens differ"
                except Exception as error:
                    problem = failure(error, f"{family.name} {attn} no press split {split}", tracebacks)
                if problem:
                    stock_failures += 1
                    del models[split]
                    print(f"{family.name:14s} {attn:6s} {'(no press)':18s} split {split}: the split model fails "
                          f"without kvprune, left out: {problem}", file=out)
            for name in presses:
                press = get_press(name, ratio=RATIO)
                reference = run(reference_model, family, press, first)
                failed = []
                for split, model in models.items():
                    checks += 1
                    try:
                        same = run(model, family, press, first) == reference
                    except Exception as error:  # a press that fails on a split model is what this looks for
                        failed.append(f"split {split}: " + failure(error, f"{family.name} {attn} {name} split {split}",
                                                                   tracebacks and not failed))
                        continue
                    if not same:
                        failed.append(f"split {split}: tokens or kept positions differ")
                differing += len(failed)
                status = "ok" if not failed else "DIFFERS: " + "; ".join(failed)
                print(f"{family.name:14s} {attn:6s} {name:18s} splits {','.join(map(str, models))}: {status}", file=out)
            for model in models.values():
                remove_hook_from_submodules(model)
    print(f"{checks} split runs compared with one device; {differing} differ."
          + (f" {stock_failures} splits fail without kvprune (left out)." if stock_failures else ""), file=out)
    return differing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="cuda:0,cuda:1", help="the two devices (default cuda:0,cuda:1; cpu,cpu: a CPU smoke test)")
    parser.add_argument("--families", help="comma-separated family names (default: every family)")
    parser.add_argument("--presses", help="comma-separated press names (default: every registered press)")
    parser.add_argument("--attn", default=",".join(ATTENTION), help="attention backends (default sdpa,eager)")
    parser.add_argument("--splits", help="first decoder layer on the second device, comma-separated (default: every one)")
    parser.add_argument("--tracebacks", action="store_true", help="print the traceback of each family x backend x press's first failure to stderr")
    args = parser.parse_args(argv)
    devices = tuple(args.devices.split(","))
    if len(devices) != 2:
        parser.error("--devices takes two devices, e.g. cuda:0,cuda:1")
    if any(d.startswith("cuda") for d in devices) and torch.cuda.device_count() < 2:
        parser.error(f"{args.devices} needs two GPUs; this machine has {torch.cuda.device_count()} (--devices cpu,cpu runs on the CPU)")
    families = [f for f in list_families() if not args.families or f.name in args.families.split(",")]
    presses = args.presses.split(",") if args.presses else list_presses()
    splits = [int(s) for s in args.splits.split(",")] if args.splits else None
    print(f"devices {devices[0]} + {devices[1]}, torch {torch.__version__}")
    return 1 if check(families, presses, args.attn.split(","), splits, devices, tracebacks=args.tracebacks) else 0


if __name__ == "__main__":
    sys.exit(main())
