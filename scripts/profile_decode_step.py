"""Where one decode step's time goes, kernel by kernel: the bench's preset and kvprune's ``Generator``, each case
(``press:rows``) profiled at two decode lengths after warm calls at both. A kernel's time in the longer call less its
time in the shorter, over the steps between them, is its time per step: the prefill, the capture of the step and
the set-up drop out.

    python scripts/profile_decode_step.py --cases fastv:64,none:16 --out "$OUT"     # one GPU, 7B shape, ~2 min
    python scripts/profile_decode_step.py --tiny --cases fastv:2 --out /tmp/profile  # tiny-omni on the CPU, seconds

On Hopper the step's kernels are dependent launches (``kvprune.generation.dependent_launch``): each starts while the
one before drains and waits inside, so their spans overlap and add up to more than the step. By default they are
launched as usual for the profile (``--dependent-launch on`` keeps them), so the spans add up, and the step is its
usual-launch time (8.38 against 7.97 ms for FastV 0.9 at 64 rows, H100, 2026-12-06). On the CPU the table lists
aten operators, which nest (``aten::linear`` holds its ``aten::addmm``). Writes ``profile_<press>_<rows>.md`` per
case and ``profile.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from kvprune.generation import dependent_launch
from kvprune.generation.generator import Generator
from kvprune.harness.bench.presets import PRESETS
from kvprune.models import resolve_family


def parse_case(text: str) -> tuple[str | None, int]:
    """``press:rows`` (``none``: the unpruned model)."""
    press, _, rows = text.partition(":")
    if not rows.isdigit() or int(rows) < 1:
        raise SystemExit(f"case {text!r}: write press:rows, e.g. fastv:64 or none:16")
    return (None if press == "none" else press), int(rows)


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


def profile_case(generator, prompt, press, rows, args, suppress, cuda) -> dict:
    """One case's per-step kernels: warm calls at both lengths (compilation, capture), then one profiled call each."""
    kwargs = dict(press=press, ratio=args.ratio if press else None, eos_token_id=[], suppress_tokens=suppress,
                  pad_token_id=0)

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
    return dict(press=press or "none", rows=rows, step_ms=1000 * out.timing.decode_s / (out.new_tokens.shape[1] - 1),
                compiled=out.step_compiled, kernels=kernels)


def table(case: dict, top: int) -> str:
    busy = sum(k["us"] for k in case["kernels"].values()) / 1000
    lines = [f"# {case['press']} at {case['rows']} rows: step {case['step_ms']:.3f} ms (the longer call's own timing), "
             f"compiled {case['compiled']}; kernels {busy:.3f} ms in "
             f"{sum(k['calls'] for k in case['kernels'].values()):.1f} launches a step", "",
             "| kernel | calls/step | us/step |", "|---|---|---|"]
    for name, k in list(case["kernels"].items())[:top]:
        lines.append(f"| `{name[:150]}` | {k['calls']:.1f} | {k['us']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", default="fastv:64,none:64", help="press:rows, comma-separated (none: unpruned)")
    parser.add_argument("--preset", default="qwen2.5-omni-7b", help="a bench preset's name")
    parser.add_argument("--seconds", type=float, default=300, help="audio seconds in the prompt")
    parser.add_argument("--ratio", type=float, default=0.9, help="every press's ratio")
    parser.add_argument("--short", type=int, default=9, help="new tokens of the shorter call")
    parser.add_argument("--long", type=int, default=41, help="new tokens of the longer call")
    parser.add_argument("--dependent-launch", choices=("on", "off"), default="off",
                        help="keep Hopper's dependent launches in the profile (their spans then overlap)")
    parser.add_argument("--top", type=int, default=30, help="kernels per table")
    parser.add_argument("--tiny", action="store_true", help="the tiny-omni preset on the CPU in float32")
    args = parser.parse_args(argv)
    if args.long <= args.short:
        raise SystemExit(f"--long ({args.long}) must exceed --short ({args.short}): the steps between them are profiled")
    cases = [parse_case(c) for c in args.cases.split(",")]
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
    for press, rows in cases:
        results.append(profile_case(generator, prompt, press, rows, args, suppress, cuda))
        text = table(results[-1], args.top)
        print(text, flush=True)
        (args.out / f"profile_{results[-1]['press']}_{rows}.md").write_text(text)
    (args.out / "profile.json").write_text(json.dumps(dict(preset=preset.name, seconds=args.seconds, cases=results,
                                                           dependent_launch=args.dependent_launch), indent=1))
    return results


if __name__ == "__main__":
    main()
