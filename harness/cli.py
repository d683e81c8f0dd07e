"""The ``kvprune`` command line: sweep, plot, report, bench, and listings of what exists.

Exit status: 0 success; 1 a sweep or bench ran but some runs failed (each is recorded with its
error); 2 bad input or configuration (the message says what and how to fix it; nothing ran);
3 a file of the results folder could not be written (a full disk, permissions: what was written is
kept; free the space, then rerun the same command to resume); 130 interrupted (``kvprune sweep``:
rerun the same command to resume)."""

from __future__ import annotations

import argparse
import errno
import os
import shlex
import sys
import warnings
from pathlib import Path

from .estimate.config import DESCRIPTION as ESTIMATE
from .sweep.disk import ResultsFileWarning, SweepOutputError, cannot_write
from .sweep.lock import FolderLockedError


# -- listings -------------------------------------------------------------------------------------
def _presses(args) -> int:
    """Each registered press: name, kind, scope (what it may remove) and parameters with their defaults
    (every press also takes ``ratio``), then what it keeps."""
    import dataclasses

    from kvprune.press import PRESSES, list_presses, list_scorers

    print(f"{'press':20s} {'kind':6s} {'scope':18s} parameters (defaults; every press also takes ratio)")
    for kind in ("token", "cache"):
        for name in list_presses(kind=kind):
            cls = PRESSES.get(name)
            fields = [f for f in dataclasses.fields(cls) if f.init and f.name != "ratio"]
            parameters = " ".join(f"{f.name}={_spelled(_default(f))}" for f in fields)
            scope = "audio|video" if kind == "token" else "audio|video|prompt"  # chosen with scope=
            summary = (sys.modules[cls.__module__].__doc__ or cls.__doc__ or "").strip().splitlines()[:1]
            print(f"{name:20s} {kind:6s} {scope:18s} {parameters}")
            print(f"{'':4s}{''.join(summary)}")
    scorers = list_scorers()
    policies = [name for name in list_presses(kind="cache") if name not in scorers]
    print("\nscope: token presses drop, and cache presses evict, audio tokens (scope=audio, the default), visual ones "
          "(scope=video: video frames and images, on the Omni families) or both (scope=audio+video); cache presses "
          "may also evict any prompt entry but the chat template's header and the last `window` (scope=prompt). press= is the press "
          f"whose scores a budget policy ({', '.join(policies)}) uses: one of {', '.join(scorers)}. Specs: "
          "`kvprune sweep --methods 'snapkv:window=32,pyramidkv:press=snapkv(window=32,kernel=7),frame+knorm'`.")
    return 0


def _default(field):
    import dataclasses

    return field.default_factory() if field.default is dataclasses.MISSING else field.default


def _spelled(value) -> str:
    """A default as a method spec writes it (booleans lowercase, a press by its name)."""
    from kvprune.press import PRESSES, Press

    if isinstance(value, Press):
        return next(name for name, cls in PRESSES.items() if cls is type(value))
    return str(value).lower() if isinstance(value, bool) else str(value)


def _families(args) -> int:
    from kvprune import list_families

    for family in list_families():
        print(f"{family.name:16s} {family.display_name:18s} {family.prompting.llm_tokens_per_second:>5g} audio tokens/s  "
              f"{', '.join(family.architectures)}")
        if family.notes:
            print(f"{'':36s}{family.notes}")
    return 0


def _tasks(args) -> int:
    from .tasks.suites import list_suites
    from .tasks.task import get_task, list_tasks

    print(f"{'task':20s} {'benchmark':14s} {'metric':28s} {'protocols':24s} data layout")
    for name in list_tasks():
        task = get_task(name)
        protocols = ", ".join([task.protocol, *task.protocols])
        print(f"{name:20s} {task.benchmark:14s} {task.primary_metric:28s} {protocols:24s} {task.data_layout}")
    print(f"\n{'suite':20s} {'benchmark':14s} {'aggregate':40s} tasks")
    for suite in list_suites():
        aggregate = f"{suite.aggregate_name}: {', '.join(suite.aggregate)}" if suite.aggregate else "—"
        print(f"{suite.name:20s} {suite.benchmark:14s} {aggregate:40s} {', '.join(suite.tasks)}")
    return 0


# -- sweep and its outputs ------------------------------------------------------------------------
def _sweep(args) -> int:
    """0 if every run succeeded, 1 if some failed, 130 if interrupted (the rows so far are kept)."""
    from .demo.default import asks_for_demo, prepare_default, runs_demo_suite
    from .sweep.config import SweepConfig

    source = None
    if args.preset is not None:  # a dry run at a preset's shape (harness/estimate/dry_run.py)
        from .estimate.dry_run import DryRunConfig, dry_run_source

        demo, config = False, DryRunConfig(**DryRunConfig.settings(args.config, **DryRunConfig.overrides(args)))
        source = dry_run_source(config)
        print(f"Dry run: {source.dry_run}, on made-up prompts; timings, memory and compilation are real, scores are not.")
    else:
        settings = SweepConfig.settings(args.config, **SweepConfig.overrides(args))
        demo = asks_for_demo(settings.get("models"))
        config = SweepConfig(**(prepare_default(settings) if demo else settings))
    from .sweep.runner import SweepInterrupted, run_sweep  # torch and transformers: once the configuration is checked
    if demo and runs_demo_suite(settings, config):
        print("Running the embedded demo model on its held-out synthetic suite (no download needed).")
    if config.batch_size == "auto":
        _choose_batch_size(config, quiet=args.quiet)
    try:
        outcome = run_sweep(config, progress=not args.quiet, command=shlex.join(["kvprune", *args.argv]), source=source)
    except SweepInterrupted as stop:
        print(f"\nkvprune sweep: interrupted after {stop.written} new result rows (kept in {stop.out}); "
              "run the same command to resume.", file=sys.stderr)
        return 130
    for note in outcome.notes:
        print(f"note: {note}", file=sys.stderr)
    if outcome.rank != 0:  # the first process writes the outputs of a distributed sweep
        return 0
    status = _finish(outcome.out, plots=not args.no_plots)
    if source is not None:
        print(f"This was a dry run ({source.dry_run}): its scores are meaningless, its timings and memory are not.")
    return status


def _choose_batch_size(config, quiet: bool) -> None:
    """--batch-size auto: the estimate's cheapest size, said with why (and recorded by the sweep)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("--batch-size auto chooses in one process: under accelerate launch, give a number (run the "
                         "sweep once with --batch-size auto, or `kvprune estimate` at the sizes you consider).")
    from .estimate.auto_batch import choose_batch_size

    choice = choose_batch_size(config, progress=not quiet)
    print(choice.reason)
    config.batch_size, config.batch_choice = choice.size, choice.reason


def _finish(out: Path, plots: bool) -> int:
    """Write the outputs, print the headline, the failures and where to look; 1 if runs failed."""
    from .sweep.headline import headline_text
    from .sweep.report import write_outputs
    from .sweep.summary import failure_effect, failures

    outputs = _writing(out, lambda: write_outputs(out, plots=plots))
    print()
    print(headline_text(outputs.summary))
    failed, total, kinds = failures(outputs.results)
    if failed:
        print(f"{failed} of {total} runs failed. {failure_effect(outputs.results, outputs.tasks)} Rerun with --retry-errors "
              "after fixing:")
        for count, example in kinds:
            print(f"  {count} × {example}")
    others = outputs.others
    if others is not None and not others.empty:
        print(f"{out} also holds {others['rows'].sum()} result(s) of earlier commands that this summary leaves out "
              f"({', '.join(sorted(set(others['method'])))}): `kvprune report {out} --all` summarises every run it holds.")
    report = out / "report.md"
    print(f"Open {report.resolve()} for the full report (also in {out.resolve()}: "
          + ", ".join(p.name for p in outputs.paths if p != report) + ").")
    return 1 if failed else 0


def _plot(args) -> int:
    from .sweep.plots import plot_summary
    from .sweep.summary import summarize_folder

    summary = summarize_folder(args.results, everything=args.all)
    for path in _writing(args.results, lambda: plot_summary(summary, args.results)):
        print(path)
    return 0


def _report(args) -> int:
    from .sweep.report import write_outputs

    for path in _writing(args.results, lambda: write_outputs(args.results, plots=False, everything=args.all)).paths:
        if path.suffix in (".md", ".csv"):
            print(path)
    return 0


#: what only a write can fail with: a full disk or quota, a file too large, a read-only file system
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _writing(out: Path, write):
    """``write()``, whose failure to write the summary, figures or report of ``out`` says that the
    results are kept and how to write the outputs again."""
    try:
        return write()
    except OSError as error:
        if isinstance(error, SweepOutputError) or error.errno not in _WRITE_ERRORS:
            raise
        raise cannot_write(Path(error.filename or out), error, f"every result is kept in {out}",
                           f"free the space, then `kvprune report {out}` writes the outputs again") from None


# -- bench ----------------------------------------------------------------------------------------
def _bench(args) -> int:
    """0 if every run succeeded, 1 if some recorded an error."""
    from .bench.config import BenchConfig
    from .bench.driver import run_bench

    config = BenchConfig.build(None, **BenchConfig.overrides(args))
    frame = run_bench(config)
    errors = frame["error"].notna()
    print(f"{len(frame)} rows, {int(errors.sum())} with errors; bench.csv, bench.md and a figure in {config.out}")
    return 1 if errors.any() else 0


# -- estimate -------------------------------------------------------------------------------------
def _estimate(args) -> int:
    """0 once every task is priced; with no model or preset, the demo sweep ``kvprune sweep`` runs."""
    from .demo.default import asks_for_demo, prepare_default
    from .estimate.config import EstimateConfig
    from .estimate.process_end import in_child, mark_ended

    settings = EstimateConfig.settings(args.config, **EstimateConfig.overrides(args))
    out = settings.get("out")
    if settings.get("preset") is None and asks_for_demo(settings.get("models")):
        settings = prepare_default(settings)
    settings["out"] = out or Path("kvprune-results") / "estimate"
    config = EstimateConfig(**settings)
    command = "kvprune " + shlex.join(args.argv)
    if not in_child():
        return _estimate_timing_its_end(args.argv, Path(config.out), command)
    from .estimate.estimate import run_estimate, settings_key  # torch: once the configuration is checked
    from .estimate.floor import BelowFloorError
    from .estimate.report import TIMED_FILE, append_timed, earlier_rows, write_estimate

    earlier = earlier_rows(Path(config.out), settings_key(config))
    if earlier is None:  # a new estimate: the timed calls of another one are not its own
        (Path(config.out) / TIMED_FILE).unlink(missing_ok=True)

    def after_task(partial, calls, units) -> None:
        write_estimate(partial, config.out, command)
        append_timed(Path(config.out), calls, units)

    try:
        table = run_estimate(config, progress=not args.quiet, earlier=earlier, after_task=after_task)
    except BelowFloorError as error:
        print(f"kvprune estimate: error: {error}", file=sys.stderr)
        return 1
    write_estimate(table, config.out, command)
    mark_ended()  # the parent prices what this process pays from here to its exit, then prints the table
    return 0


def _estimate_timing_its_end(argv: list[str], out: Path, command: str) -> int:
    """The estimate in a child process (``estimate/process_end.py``), then what that child paid to end
    added to the fixed costs, and the table."""
    import pandas as pd

    from .estimate.process_end import run_timing_the_end
    from .estimate.report import write_estimate
    from .estimate.report_rows import with_process_end

    status, ending = run_timing_the_end(argv)
    if status != 0 or ending is None:
        return status
    written = write_estimate(with_process_end(pd.read_csv(out / "estimate.csv"), ending), out, command)
    print(written[1].read_text())
    return 0


# -- parser ---------------------------------------------------------------------------------------
FIGURE_COMMANDS = ("sweep", "plot", "bench", "estimate")  # the commands that write figures to files (the estimate: to time them)
BENCH = "time pruned against unpruned prefill and decode at real model shapes (random weights, one GPU)"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``kvprune`` parser; with ``command``, only that command's options are added (the bench's
    name its presets, which imports torch and transformers: a sweep's mistakes are found without)."""
    parser = argparse.ArgumentParser(prog="kvprune", description="Prune audio tokens in audio LLMs and measure what it costs.")
    commands = parser.add_subparsers(dest="command")
    sweep = commands.add_parser("sweep", help="run models x tasks x methods x ratios (no arguments: the embedded demo)")
    if command in (None, "sweep"):
        from .sweep.config import add_sweep_arguments

        add_sweep_arguments(sweep)
    sweep.set_defaults(run=_sweep)
    everything = dict(action="store_true", help="every result in the folder, grouped by everything that identifies a run "
                      "(default: the runs its last sweep asked for)")
    for name, summary, run in (("plot", "write the PNG plots of a results folder", _plot),
                               ("report", "write summary.csv and report.md of a results folder", _report)):
        outputs = _command(commands, name, summary, run)
        outputs.add_argument("results", type=Path, help="a folder written by `kvprune sweep`")
        outputs.add_argument("--all", **everything)
    bench = _command(commands, "bench", BENCH, _bench)
    if command in (None, "bench"):
        from .bench.config import add_bench_arguments

        add_bench_arguments(bench)
    estimate = _command(commands, "estimate", ESTIMATE, _estimate)
    if command in (None, "estimate"):
        from .estimate.config import add_estimate_arguments

        add_estimate_arguments(estimate)
    _command(commands, "tasks", "list the benchmark tasks and suites: benchmark, metric, protocols, data layout", _tasks)
    _command(commands, "presses", "list the presses: kind, scope, parameters with their defaults, what each keeps", _presses)
    _command(commands, "families", "list the supported model families: audio tokens per second, architectures", _families)
    return parser


def _command(commands, name: str, summary: str, run) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` opens with the line ``kvprune --help`` lists it by."""
    parser = commands.add_parser(name, help=summary, description=summary)
    parser.set_defaults(run=run)
    return parser


def _hide_library_progress() -> None:
    """``--quiet`` means no progress bars at all: transformers draws its own while loading weights."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)  # the words as given, for the records
    parser = build_parser(next((word for word in words if not word.startswith("-")), None))
    args = parser.parse_args(words)
    args.argv = words
    if not hasattr(args, "run"):
        parser.print_help()
        return 0
    if getattr(args, "quiet", False):
        _hide_library_progress()
    if args.command in FIGURE_COMMANDS:
        import matplotlib

        matplotlib.use("Agg")  # figures go to files: no window, whatever the environment's default backend
    try:
        with warnings.catch_warnings():
            _warn_in_words(args.command)
            return args.run(args)
    except KeyboardInterrupt:
        print(f"\nkvprune {args.command}: interrupted.", file=sys.stderr)
        return 130
    except (ValueError, OSError, FolderLockedError) as error:  # bad input, an unwritable folder: say what, no traceback
        if os.environ.get("KVPRUNE_DEBUG"):
            raise
        print(f"kvprune {args.command}: error: {error}", file=sys.stderr)
        return 3 if isinstance(error, SweepOutputError) else 2


def _warn_in_words(command: str) -> None:
    """The harness's own warnings (an unreadable line of a results file...) as one sentence each,
    once per command, without the Python source line that warned."""
    show_others, said = warnings.showwarning, set()

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, ResultsFileWarning):
            show_others(message, category, filename, lineno, file, line)
        elif str(message) not in said:
            said.add(str(message))
            print(f"kvprune {command}: warning: {message}", file=sys.stderr)

    warnings.showwarning = show
    warnings.filterwarnings("always", category=ResultsFileWarning)


if __name__ == "__main__":
    sys.exit(main())
