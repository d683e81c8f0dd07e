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

import torch
from torch.profiler import ProfilerActivity, profile

from kvprune.generation import dependent_launch
from kvprune.generation.generator import Generator
from kvprune.harness.bench.step_cases import StepModel, add_case_arguments, file_label, parse_cases, step_ms


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


def profile_case(generator, setup: StepModel, label, press, rows, args, cuda) -> dict:
    """One case's per-step kernels: warm calls at both lengths (compilation, capture), then one profiled call each."""

    def generate(tokens):
        return setup.generate(generator, press, rows, tokens)

    generator.forget_states()
    for tokens in (args.short, args.long):
        generate(tokens)
    short, short_calls, _ = kernel_times(generate, args.short, cuda)
    long, long_calls, out = kernel_times(generate, args.long, cuda)
    steps = args.long - args.short
    kernels = {name: dict(us=(long[name] - short[name]) / steps, calls=(long_calls[name] - short_calls[name]) / steps)
               for name in long}
    # the kernels each step launches; one launched only in setting up a call differs by no launch, and its time by noise
    kernels = dict(sorted(((k, v) for k, v in kernels.items() if v["calls"] > 0), key=lambda kv: -kv[1]["us"]))
    return dict(method=label, rows=rows, step_ms=step_ms(out), compiled=out.step_compiled, kernels=kernels)


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
    add_case_arguments(parser, methods="none,fastv", batch_sizes="64")
    parser.add_argument("--short", type=int, default=9, help="new tokens of the shorter call")
    parser.add_argument("--long", type=int, default=41, help="new tokens of the longer call")
    parser.add_argument("--dependent-launch", choices=("on", "off"), default="off",
                        help="keep Hopper's dependent launches in the profile (their spans then overlap)")
    parser.add_argument("--top", type=int, default=30, help="kernels per table")
    args = parser.parse_args(argv)
    if args.long <= args.short:
        raise SystemExit(f"--long ({args.long}) must exceed --short ({args.short}): the steps between them are profiled")
    cases = parse_cases(args.methods, args.batch_sizes, args.ratio)
    cuda = not args.tiny
    dependent_launch.ENABLED = args.dependent_launch == "on"
    setup = StepModel.build(args.preset, args.seconds, args.tiny)
    generator = Generator(setup.model, state_room=1)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for label, press, rows in cases:
        results.append(profile_case(generator, setup, label, press, rows, args, cuda))
        text = table(results[-1], args.top)
        print(text, flush=True)
        (args.out / f"profile_{file_label(label)}_{rows}.md").write_text(text)
    (args.out / "profile.json").write_text(json.dumps(dict(preset=setup.preset.name, seconds=args.seconds, cases=results,
                                                           dependent_launch=args.dependent_launch), indent=1))
    return results


if __name__ == "__main__":
    main()
