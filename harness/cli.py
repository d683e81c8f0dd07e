"""The ``kvprune`` command line: sweep, plot, report, bench, and listings of what exists."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


# -- listings -------------------------------------------------------------------------------------
def _presses(args) -> int:
    from kvprune.press import PRESSES, list_presses

    for kind in ("token", "cache"):
        for name in list_presses(kind=kind):
            cls = PRESSES.get(name)
            summary = (sys.modules[cls.__module__].__doc__ or cls.__doc__ or "").strip().splitlines()[:1]
            print(f"{name:8s} {kind:6s} {''.join(summary)}")
    return 0


def _families(args) -> int:
    from kvprune import list_families

    for family in list_families():
        print(f"{family.name:16s} {family.display_name:18s} {family.llm_tokens_per_second:>5g} audio tokens/s  "
              f"{', '.join(family.architectures)}")
        if family.notes:
            print(f"{'':36s}{family.notes}")
    return 0


def _tasks(args) -> int:
    from .tasks.task import get_task, list_tasks

    for name in list_tasks():
        task = get_task(name)
        print(f"{name:14s} {task.abbreviation:5s} {task.primary_metric:12s} {task.title}")
    return 0


# -- sweep and its outputs ------------------------------------------------------------------------
def _sweep(args) -> int:
    from .sweep.runner import run_sweep
    from .sweep.config import SweepConfig

    overrides = dict(
        models=args.model, tasks=args.tasks, methods=args.methods, ratios=args.ratios, layer=args.layer,
        limit=args.limit, data_root=args.data_root, out=args.out, dtype=args.dtype, device=args.device,
        device_map=args.device_map, attn_implementation=args.attn_implementation,
        trust_remote_code=args.trust_remote_code or None, max_new_tokens=args.max_new_tokens,
        retry_errors=args.retry_errors or None,
    )
    if args.config is None and args.model in (None, "demo"):
        from .demo.default import prepare_default

        overrides = prepare_default(overrides)
        print("Running the embedded demo model on its held-out synthetic suite (no download needed).")
    config = SweepConfig.build(args.config, **overrides)
    out = run_sweep(config, progress=not args.quiet)
    written = _write_outputs(out, plots=not args.no_plots)
    print(f"Results, summary and plots are in {out.resolve()}:")
    for path in written:
        print(f"  {path.name}")
    return 0


def _write_outputs(out: Path, plots: bool = True) -> list[Path]:
    from .sweep.plots import plot_summary
    from .sweep.report import write_report
    from .sweep.store import read_results
    from .sweep.summary import summarize

    summary = summarize(read_results(out))
    summary_path = out / "summary.csv"
    summary.to_csv(summary_path, index=False)
    written = [out / "results.jsonl", summary_path]
    if plots:
        written += plot_summary(summary, out)
    written.append(write_report(summary, out))
    return [p for p in written if p.exists()]


def _bench(args) -> int:
    from .bench.config import bench_main

    return bench_main(args)


def _plot(args) -> int:
    from .sweep.plots import plot_summary
    from .sweep.store import read_results
    from .sweep.summary import summarize

    for path in plot_summary(summarize(read_results(args.results)), args.results):
        print(path)
    return 0


def _report(args) -> int:
    for path in _write_outputs(args.results, plots=False):
        if path.suffix in (".md", ".csv"):
            print(path)
    return 0


# -- parser ---------------------------------------------------------------------------------------
def _add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--config", type=Path, help="a sweep YAML (see bench_configs/); command-line options override it")
    add("--model", help="Hugging Face id or local directory (comma-separated for several)")
    add("--tasks", help="comma-separated task names (see `kvprune tasks`)")
    add("--methods", help="method specs, e.g. 'fastv,dart:budget=reference,frame+knorm:ratio=0.3' "
        "(presses: `kvprune presses`); default: every token-dropping press")
    add("--ratios", help="'0.1..0.9' (step 0.1), '0.1..0.9:0.2' or '0,0.5,0.9'; default 0.1..0.9")
    add("--layer", type=int, help="first decoder layer of every press that sets none (token presses drop before it); "
        "default: each press's own (2 for token presses, 1 for cache presses)")
    add("--limit", type=int, help="at most N samples per task")
    add("--data-root", type=Path, help="folder holding each task's data in its native layout")
    add("--out", type=Path, help="results folder; rerunning the same command resumes it")
    add("--dtype", choices=["auto", "float32", "bfloat16", "float16"])
    add("--device", help="e.g. cuda, cuda:1, cpu (default: cuda if available)")
    add("--device-map", help="accelerate device map, e.g. auto, to split a model over GPUs")
    add("--attn-implementation", choices=["sdpa", "eager", "flash_attention_2"])
    add("--trust-remote-code", action="store_true", help="needed for models shipping their own code (Aero-1)")
    add("--max-new-tokens", type=int, help="override each task's generation length")
    add("--retry-errors", action="store_true", help="rerun samples recorded with an error")
    add("--no-plots", action="store_true")
    add("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvprune", description="Prune audio tokens in audio LLMs and measure what it costs.")
    commands = parser.add_subparsers(dest="command")
    sweep = commands.add_parser("sweep", help="run models x tasks x methods x ratios (no arguments: the embedded demo)")
    _add_sweep_arguments(sweep)
    sweep.set_defaults(run=_sweep)
    plot = commands.add_parser("plot", help="write the PNG plots of a results folder")
    plot.add_argument("results", type=Path)
    plot.set_defaults(run=_plot)
    report = commands.add_parser("report", help="write summary.csv and report.md of a results folder")
    report.add_argument("results", type=Path)
    report.set_defaults(run=_report)
    from .bench.config import DESCRIPTION, add_bench_arguments

    bench = commands.add_parser("bench", help=DESCRIPTION, description=DESCRIPTION)
    add_bench_arguments(bench)
    bench.set_defaults(run=_bench)
    commands.add_parser("tasks", help="list the benchmark tasks").set_defaults(run=_tasks)
    commands.add_parser("presses", help="list the presses").set_defaults(run=_presses)
    commands.add_parser("families", help="list the supported model families").set_defaults(run=_families)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 0
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError) as error:  # bad input: say what and how to fix it, no traceback
        if os.environ.get("KVPRUNE_DEBUG"):
            raise
        print(f"kvprune {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
