"""A/B of the decode step: variants (settings of kvprune's module attributes) alternated in one process on one
card, each round a fresh compilation and capture, ms per step from the engine's own timing, tokens compared with
the first variant's first round. Host speed drifts and cards differ by up to 1.5x: only variants timed in one run,
alternated, compare.

    python scripts/ab_decode_step.py --variants "fused;unfused:kvprune.generation.gemv.FUSE_GATES=False" \\
        --methods fastv --batch-sizes 16,64 --out "$OUT"                           # one GPU, 7B, ~1 min a round
    python scripts/ab_decode_step.py --tiny --variants "a;b" --batch-sizes 2 --out /tmp/ab   # tiny-omni, CPU

``--variants``: ``;``-separated, each ``name`` (the code as it is) or ``name:module.attribute=value,...`` with
Python literals for values, e.g. ``cublas:kvprune.generation.gemv.MAX_ROWS=1``; each variant's settings hold for
its own runs only. ``--methods`` and ``--batch-sizes`` are ``kvprune bench``'s (``none``: unpruned). Each round takes
the cases in turn and runs every variant on a case before the next case (a run cut short by ``--budget-s`` or a time
limit still has each case it reached under every variant); per case and variant: ``torch._dynamo.reset()``, the
linear kernels' tuning forgotten, a new ``Generator``, a warm call (the compilation), then ``--repeats`` timed calls
of ``--steps`` decode steps. Writes ``ab.jsonl`` (a line per variant, round and case) and ``ab.md`` (medians, a column
per variant) to ``--out``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import json
import statistics
import time

import torch

from kvprune.generation import gemv
from kvprune.generation.generator import Generator
from kvprune.harness.bench.step_cases import StepModel, add_case_arguments, parse_cases, step_ms


def parse_variants(text: str) -> list[tuple[str, dict[tuple[str, str], object]]]:
    """(name, {(module, attribute): value}) per variant; an unknown module or attribute, a value that is no Python
    literal, or a repeated name names the fix."""
    variants = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, settings = part.partition(":")
        values = {}
        for setting in filter(None, (s.strip() for s in settings.split(","))):
            target, equals, value = setting.partition("=")
            module, _, attribute = target.strip().rpartition(".")
            if not equals or not module:
                raise SystemExit(f"--variants: {setting!r} in {name!r}: write module.attribute=value, e.g. "
                                 "kvprune.generation.gemv.MAX_ROWS=1")
            try:
                owner = importlib.import_module(module)
            except ImportError:
                raise SystemExit(f"--variants: no module {module!r} (in {name!r}): name one of kvprune's") from None
            if not hasattr(owner, attribute):
                raise SystemExit(f"--variants: {module} has no attribute {attribute!r} (in {name!r}): the variant would "
                                 "set nothing the code reads")
            try:
                values[(module, attribute)] = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                raise SystemExit(f"--variants: {value.strip()!r} (for {target.strip()}) is no Python literal: write e.g. "
                                 "1, 0.5, False or 'text' (a value holds no comma)") from None
        variants.append((name.strip(), values))
    names = [name for name, _ in variants]
    if not names or len(set(names)) < len(names) or "" in names:
        raise SystemExit(f"--variants {text!r}: give distinct names, ';'-separated, e.g. 'base;cublas:"
                         "kvprune.generation.gemv.MAX_ROWS=1'")
    return variants


@contextlib.contextmanager
def settings(values: dict[tuple[str, str], object]):
    """The variant's attributes set while it runs, then what they were."""
    saved = {(m, a): getattr(importlib.import_module(m), a) for m, a in values}
    try:
        for (module, attribute), value in values.items():
            setattr(importlib.import_module(module), attribute, value)
        yield
    finally:
        for (module, attribute), value in saved.items():
            setattr(importlib.import_module(module), attribute, value)


def run_variant(setup: StepModel, case, args, first_tokens: dict) -> dict:
    """One case under the settings in force: a fresh compilation, a warm call, ``args.repeats`` timed calls."""
    torch._dynamo.reset()
    gemv._TUNED.clear()
    generator = Generator(setup.model, state_room=1)
    label, press, rows = case
    start = time.perf_counter()
    setup.generate(generator, press, rows, args.steps + 1)
    warm_s = time.perf_counter() - start
    outs = [setup.generate(generator, press, rows, args.steps + 1) for _ in range(args.repeats)]
    tokens = outs[-1].new_tokens.cpu()
    same = bool(torch.equal(first_tokens.setdefault((label, rows), tokens), tokens))
    return dict(method=label, rows=rows, step_ms=[step_ms(out) for out in outs],
                median_ms=statistics.median(step_ms(out) for out in outs), warm_s=round(warm_s, 1),
                compiled=outs[-1].step_compiled, fallbacks=generator.fallbacks, tokens_equal_first=same)


def table(results: list[dict], variants: list[str]) -> str:
    """Medians per case (rows) and variant (columns), one figure per round."""
    cases = list(dict.fromkeys((r["method"], r["rows"]) for r in results))
    lines = ["| method | rows | " + " | ".join(variants) + " |", "|---|---|" + "---|" * len(variants)]
    for method, rows in cases:
        cells = [" / ".join(f"{r['median_ms']:.3f}" for r in results
                            if (r["method"], r["rows"], r["variant"]) == (method, rows, v)) or "-" for v in variants]
        lines.append(f"| {method} | {rows} | " + " | ".join(cells) + " |")
    differing = sorted({r["variant"] for r in results if not r["tokens_equal_first"]})
    note = f"tokens differ from the first variant's first round in: {', '.join(differing)}" if differing else \
        "tokens equal to the first variant's first round in every round"
    return "ms per decode step, medians of each round's timed calls (rounds separated by /)\n\n" + "\n".join(lines) + \
        f"\n\n{note}\n"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", required=True, help="';'-separated: name or name:module.attribute=value,...")
    add_case_arguments(parser, methods="fastv", batch_sizes="16,64")
    parser.add_argument("--steps", type=int, default=64, help="decode steps a timed call")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per case and round")
    parser.add_argument("--rounds", type=int, default=2, help="times each case runs under each variant, alternated")
    parser.add_argument("--budget-s", type=float, default=None, help="start no case after this many seconds")
    args = parser.parse_args(argv)
    if min(args.steps, args.repeats, args.rounds) < 1:
        raise SystemExit("--steps, --repeats and --rounds must be at least 1")
    variants = parse_variants(args.variants)
    cases = parse_cases(args.methods, args.batch_sizes, args.ratio)
    setup = StepModel.build(args.preset, args.seconds, args.tiny)
    args.out.mkdir(parents=True, exist_ok=True)
    start, results, first_tokens = time.perf_counter(), [], {}
    with open(args.out / "ab.jsonl", "w") as log:
        for round_, case in ((r, c) for r in range(args.rounds) for c in cases):
            if args.budget_s is not None and time.perf_counter() - start > args.budget_s:
                print(f"budget of {args.budget_s:.0f} s spent: stopping before round {round_} of {case[0]} at "
                      f"{case[2]} rows", flush=True)
                break
            for name, values in variants:  # every variant of a case before the next case: a cut run still compares
                with settings(values):
                    row = dict(variant=name, round=round_, **run_variant(setup, case, args, first_tokens))
                print(json.dumps(row), flush=True)
                log.write(json.dumps(row) + "\n")
                log.flush()
                results.append(row)
    text = table(results, [name for name, _ in variants])
    print(text, flush=True)
    (args.out / "ab.md").write_text(text)
    return results


if __name__ == "__main__":
    main()
