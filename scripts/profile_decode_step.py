"""Where one decode step's time goes, kernel by kernel: the bench's preset and kvprune's ``Generator``, each method
(``kvprune bench``'s syntax, ``none``: unpruned) at each batch size profiled at two decode lengths after warm calls
at both. A kernel's time in the longer call less its
time in the shorter, over the steps between them, is its time per step: the prefill, the capture of the step and
the set-up drop out.

    python scripts/profile_decode_step.py --methods none,fastv --batch-sizes 64 --out "$OUT"  # one GPU, 7B, ~3 min
    python scripts/profile_decode_step.py --tiny --batch-sizes 2 --out /tmp/profile          # tiny-omni on the CPU

On Hopper the step's kernels are dependent launches (``kvprune.generation.dependent_launch``): each starts while the
one before drains and waits inside, so their spans overlap and add up to more than the step. By default they are
launched as usual for the profile (``--dependent-launch on`` keeps them), so the spans add up, and the step is its
usual-launch time (8.38 against 7.97 ms for FastV 0.9 at 64 rows, H100, 2026-12-06). On the CPU the table lists
aten operators, which nest (``aten::linear`` holds its ``aten::addmm``). Writes ``profile_<method>_<rows>.md`` per
case and ``profile.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from kvprune.generation import dependent_launch
from kvprune.generation.generator import Generator
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.setup.options import name_list
from kvprune.models import resolve_family
from kvprune.specs import MethodSpecError, parse_methods


def parse_cases(methods: str, batch_sizes: str, ratio: float) -> list[tuple[str, object, int]]:
    """(label, press or None, rows) for every method at every batch size, in the order given; the methods are
    ``kvprune bench``'s (parsed by ``parse_methods``, so a press's own parameters may hold commas), ``none`` the
    unpruned model; a method's own ratio wins over ``ratio``."""
    try:
        sizes = [int(size) for size in name_list(batch_sizes)]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise SystemExit(f"--batch-sizes {batch_sizes!r}: write positive whole numbers, comma-separated, e.g. 16,64")
    presses = []
    for i, between in enumerate(re.split(r"(?:^|,)\s*none\s*(?=,|$)", methods)):  # the text around each "none"
        if i:
            presses.append(("none", None))
        try:
            parsed = parse_methods(between) if between.strip(", ") else []
        except MethodSpecError as error:
            raise SystemExit(f"--methods: {error}") from None
        presses += [(method.label, method.build((method.own_ratios or (ratio,))[0])) for method in parsed]
    return [(label, press, rows) for label, press in presses for rows in sizes]


def kernel_times(generate, tokens: int, cuda: bool) -> tuple[collections.Counter, collections.Counter, object]:
    """Each kernel's (on the CPU: operator's) total microseconds and calls over one ``generate(tokens)``."""
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        out = generate(tokens)
        if cuda:
            torch.cuda.synchronize()
    times, calls = collections.Counter(), collections.Counter()
    for event in prof.events():
        if cuda and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        times[event.name] += event.device_time_total if cuda else event.cpu_time_total
        calls[event.name] += 1
    return times, calls, out


def profile_case(generator, prompt, label, press, rows, args, suppress, cuda) -> dict:
    """One case's per-step kernels: warm calls at both lengths (compilation, capture), then one profiled call each."""
    kwargs = dict(press=press, eos_token_id=[], suppress_tokens=suppress, pad_token_id=0)

    def generate(tokens):
        return generator.generate([prompt.inputs] * rows, max_new_tokens=tokens, **kwargs)

    generator.forget_states()
    for tokens in (args.short, args.long):
        generate(tokens)
    short, short_calls, _ = kernel_times(generate, args.short, cuda)
    long, long_calls, out = kernel_times(generate, args.long, cuda)
    steps = args.long - args.short
    kernels = {name: dict(us=(long[name] - short[name]) / steps, calls=(long_calls[name] - short_calls[name]) / steps)
               for name in long}
    kernels = dict(sorted(((k, v) for k, v in kernels.items() if v["us"] > 0.5), key=lambda kv: -kv[1]["us"]))
    return dict(method=label, rows=rows, step_ms=1000 * out.timing.decode_s / (out.new_tokens.shape[1] - 1),
                compiled=out.step_compiled, kernels=kernels)


def table(case: dict, top: int) -> str:
    busy = sum(k["us"] for k in case["kernels"].values()) / 1000
    lines = [f"# {case['method']} at {case['rows']} rows: step {case['step_ms']:.3f} ms (the longer call's own timing), "
             f"compiled {case['compiled']}; kernels {busy:.3f} ms in "
             f"{sum(k['calls'] for k in case['kernels'].values()):.1f} launches a step", "",
             "| kernel | calls/step | us/step |", "|---|---|---|"]
    for name, k in list(case["kernels"].items())[:top]:
        lines.append(f"| `{name[:150]}` | {k['calls']:.1f} | {k['us']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--methods", default="none,fastv", help="kvprune bench's methods, comma-separated (none: unpruned)")
    parser.add_argument("--batch-sizes", default="64", help="rows decoded together, comma-separated")
    parser.add_argument("--preset", default="qwen2.5-omni-7b", help="a bench preset's name")
    parser.add_argument("--seconds", type=float, default=300, help="audio seconds in the prompt")
    parser.add_argument("--ratio", type=float, default=0.9, help="the ratio of methods that set none")
    parser.add_argument("--short", type=int, default=9, help="new tokens of the shorter call")
    parser.add_argument("--long", type=int, default=41, help="new tokens of the longer call")
    parser.add_argument("--dependent-launch", choices=("on", "off"), default="off",
                        help="keep Hopper's dependent launches in the profile (their spans then overlap)")
    parser.add_argument("--top", type=int, default=30, help="kernels per table")
    parser.add_argument("--tiny", action="store_true", help="the tiny-omni preset on the CPU in float32")
    args = parser.parse_args(argv)
    if args.long <= args.short:
        raise SystemExit(f"--long ({args.long}) must exceed --short ({args.short}): the steps between them are profiled")
    cases = parse_cases(args.methods, args.batch_sizes, args.ratio)
    cuda = not args.tiny
    device = torch.device("cuda" if cuda else "cpu")
    dependent_launch.ENABLED = args.dependent_launch == "on"
    preset = PRESETS.get("tiny-omni" if args.tiny else args.preset)
    model = preset.build(device, torch.bfloat16 if cuda else torch.float32, "sdpa")
    prompt = preset.prompt(model, args.seconds, decode_tokens=1)
    suppress = [resolve_family(model).audio_token_id(model)]
    generator = Generator(model, state_room=1)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for label, press, rows in cases:
        results.append(profile_case(generator, prompt, label, press, rows, args, suppress, cuda))
        text = table(results[-1], args.top)
        print(text, flush=True)
        (args.out / f"profile_{re.sub(r'[^A-Za-z0-9_.=+-]', '_', label)}_{rows}.md").write_text(text)
    (args.out / "profile.json").write_text(json.dumps(dict(preset=preset.name, seconds=args.seconds, cases=results,
                                                           dependent_launch=args.dependent_launch), indent=1))
    return results


if __name__ == "__main__":
    main()
