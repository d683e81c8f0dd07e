"""What a sweep runs: models x tasks x methods x ratios, from a YAML file and command-line overrides.

Tasks are built-in names or paths of task YAML files (``tasks.task.get_task``).
Methods are method specs (``kvprune.specs``): ``fastv``, ``dart:budget=reference``, ``frame+knorm:ratio=0.3``.
``layer`` (``--layer``), when given, is the layer of every press that does not set its own; when not,
each press acts where it does by default. ``protocol`` (``--protocol``), when given, runs every task
under that protocol (``tasks.protocols``; default: each task's own), its presses with its keep rule.
``long_audio`` is the policy for clips longer than a model takes (``harness.long_audio``): one for
every task (``split``), or per task name with a ``default`` (``{default: split, librispeech: truncate}``).
``judge`` (``--judge``) is an LLM judge spec (``harness.judge``) for the judged steps of grading: AVI-Bench's
refine step and judged metrics such as MMAR-Rubrics (``tasks.judged``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ..judge import parse_judge_spec
from ..long_audio import DEFAULT_POLICY, POLICIES
from ..setup.config import CommandConfig, unique_methods
from ..setup.options import add_shared_options, name_list
from ..setup.ratio_lists import parse_ratios
from ..tasks.protocols import PROTOCOLS
from ..tasks.suites import expand_suites
from ..tasks.task import get_task

if TYPE_CHECKING:
    from kvprune.specs import MethodSpec

BASELINE = "none"  # the method name of the unpruned run, done once per model x task
AUTO = "auto"  # --batch-size auto: chosen by the estimate before the sweep runs


def default_methods() -> list[MethodSpec]:
    """The sweep's methods when none are given: every registered token-dropping press."""
    from kvprune.press import list_presses

    return unique_methods(list_presses(kind="token"))


class SweepConfigError(ValueError):
    """A sweep configuration names something that does not exist or has the wrong shape."""


@dataclass
class SweepConfig(CommandConfig):
    file_kind: ClassVar[str] = "sweep config"
    error: ClassVar[type[ValueError]] = SweepConfigError
    aliases: ClassVar[dict[str, str]] = {"model": "models"}  # a single model is the common case

    models: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    methods: list[MethodSpec] | None = None  # None: default_methods()
    ratios: list[float] = field(default_factory=lambda: parse_ratios("0.1..0.9"))
    layer: int | None = None
    limit: int | None = None
    data_root: Path | None = None
    out: Path = Path("kvprune-results")
    dtype: str = "auto"
    device: str | None = None
    device_map: str | None = None
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    max_new_tokens: int | None = None
    retry_errors: bool = False
    encoder: str = "fast"  # fast: kvprune.fast_audio_encoder; stock: the model's own (--stock-encoder)
    protocol: str | None = None  # run every task under this protocol (None: each task's own)
    cache: str = "auto"  # how decoding runs: engine (kvprune's), static or dynamic (stock generate); auto: engine
    batch_size: int | str = 1  # samples decoded together (each prefilled on its own); "auto": the estimate's cheapest
    batch_choice: str | None = None  # why --batch-size auto chose the size it did (what the sweep records)
    reuse_encoder: bool = True  # a sample's audio encoder output computed once for all its runs
    share_layers: bool = True  # a sample's layers < K computed once for its token presses at K
    compile_prefill: bool | str = "auto"  # the engine's prefill layers >= K compiled; auto: its default (on CUDA)
    timing_samples: int = 4  # per task, samples also run alone without sharing, for per-sample timings
    long_audio: str | dict = DEFAULT_POLICY  # a policy, or {task name or "default": policy}
    overwrite: bool = False  # discard the folder's earlier results instead of refusing other settings
    rehash_audio: bool = False  # digest every audio file's content again instead of trusting the digest cache
    judge: str | None = None  # an LLM judge spec for judged grading (harness.judge)
    no_audio: bool = False  # prompts without their audio (captions where a task has them): ablations

    def normalise(self) -> None:
        """The settings written as text, but the methods: ``validate`` reads them after checking the
        rest, since their presses' registry imports torch, so that a mistake elsewhere is reported at once."""
        self.ratios = sorted(set(parse_ratios(self.ratios)))
        self.models, self.tasks = name_list(self.models), name_list(self.tasks)
        self.data_root = None if self.data_root is None else Path(self.data_root).expanduser()
        self.out = Path(self.out).expanduser()

    def validate(self) -> None:
        self.check_inputs()
        self.check_runs()

    def check_inputs(self) -> None:
        """The model, the tasks (known names, readable files) and their data folder exist."""
        if not self.models:
            raise SweepConfigError("no model given: pass --model (a Hugging Face id or a local directory).")
        if not self.tasks:
            raise SweepConfigError("no task given: pass --tasks (see `kvprune tasks`).")
        for name in expand_suites(self.tasks):  # an unknown name or a broken task file, before torch is loaded
            get_task(name)
        if self.data_root is None:
            raise SweepConfigError("no data folder given: pass --data-root DIR, the folder holding each task's data.")
        if not Path(self.data_root).is_dir():
            raise SweepConfigError(f"data root {self.data_root} is not a directory: pass --data-root DIR.")

    def check_runs(self) -> None:
        """Ratios, layer, protocol and every other setting of how the runs go, then the methods and the
        device, which need torch (the presses' registry): a mistake in the others is reported first."""
        if self.layer is not None and self.layer < 1:
            raise SweepConfigError(f"layer={self.layer} is invalid: pruning starts at decoder layer 1 or later.")
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise SweepConfigError(f"protocol={self.protocol!r} is unknown; the protocols are {', '.join(PROTOCOLS)}.")
        if self.limit is not None and self.limit < 1:
            raise SweepConfigError(f"limit={self.limit} is invalid: give a positive number of samples per task.")
        tokens = self.max_new_tokens
        if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1):
            raise SweepConfigError(
                f"max_new_tokens={tokens!r} is invalid: it must be a whole number, at least 1 (--max-new-tokens; "
                "leave it out for each task's own)."
            )
        for name in ("batch_size", "timing_samples"):
            value, least = getattr(self, name), 1 if name == "batch_size" else 0
            if name == "batch_size" and value == AUTO:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise SweepConfigError(
                    f"{name}={value!r} is invalid: it must be a whole number, at least {least} (--{name.replace('_', '-')})."
                )
        for name in ("reuse_encoder", "share_layers"):
            if not isinstance(getattr(self, name), bool):
                raise SweepConfigError(f"{name}={getattr(self, name)!r} is invalid: true or false "
                                       f"(--no-{name.replace('_', '-')}).")
        if self.judge is not None:
            try:
                parse_judge_spec(self.judge)
            except ValueError as error:
                raise SweepConfigError(f"--judge: {error}") from None
        policies = self.long_audio.values() if isinstance(self.long_audio, dict) else [self.long_audio]
        for policy in policies:
            if policy not in POLICIES:
                raise SweepConfigError(f"long-audio policy {policy!r} is invalid: choose {', '.join(POLICIES)}.")
        self.methods = default_methods() if self.methods is None else unique_methods(self.methods)
        if not self.methods:
            raise SweepConfigError(
                "no method given: pass --methods, e.g. fastv,frame (see `kvprune presses`); the unpruned baseline runs "
                "with every method."
            )
        self.check_shared()

    @classmethod
    def overrides(cls, args: argparse.Namespace) -> dict:
        return dict(
            models=args.model, tasks=args.tasks, methods=args.methods, ratios=args.ratios, layer=args.layer,
            limit=args.limit, data_root=args.data_root, out=args.out, dtype=args.dtype, device=args.device,
            device_map=args.device_map, attn_implementation=args.attn_implementation,
            trust_remote_code=args.trust_remote_code or None, max_new_tokens=args.max_new_tokens,
            retry_errors=args.retry_errors or None, encoder="stock" if args.stock_encoder else None, cache=args.cache,
            protocol=args.protocol, long_audio=args.long_audio, overwrite=args.overwrite or None, judge=args.judge,
            no_audio=args.no_audio or None, batch_size=args.batch_size, timing_samples=args.timing_samples,
            reuse_encoder=False if args.no_reuse_encoder else None, rehash_audio=args.rehash_audio or None,
            share_layers=False if args.no_share_layers else None,
            compile_prefill=args.compile_prefill,
        )

    def long_audio_policy(self, task: str) -> str:
        """The long-audio policy of one task."""
        if isinstance(self.long_audio, dict):
            return self.long_audio.get(task, self.long_audio.get("default", DEFAULT_POLICY))
        return self.long_audio


# -- command line ------------------------------------------------------------------------------------
SWEEP_EPILOG = """\
With no option at all, the embedded demo model runs on its synthetic suite (no download).

A results folder holds one configuration. Every run is identified by what determines its outputs
(the model's files or revision, --dtype, --attn-implementation, --max-new-tokens, --decoding as
resolved, --stock-encoder, --protocol, --long-audio, --judge for judged tasks, --no-audio, each
task's config, the method's full spec with its layer and keep rule, the ratio, the prompt and the
media files' content): rerunning the same
command resumes a folder; new methods, ratios, tasks or samples extend it; other settings are
refused (use another --out, or --overwrite). One sweep writes to a folder at a time.

A folder's summary and report cover the runs of its last command; report.md lists the runs earlier
commands left in it, and `kvprune report DIR --all` summarises them all. Labels fixed in a dataset
(the same audio and prompts) are scored again from the stored outputs, without generating again.

Exit status: 0 all runs succeeded, 1 some runs failed (each is recorded with its error and counts
as a wrong answer), 2 the configuration is wrong (nothing ran), 3 a file of the results folder
could not be written (a full disk: what was written is kept; free space and rerun the same command
to resume), 130 interrupted (rerun the same command to resume)."""


def _batch_size(text: str) -> int | str:
    """--batch-size: a whole number, or auto."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or auto") from None


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """``kvprune sweep``'s options; those left out (None) keep the YAML's or the default value."""
    parser.epilog = SWEEP_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add = parser.add_argument
    add("--config", type=Path, help="a sweep YAML (see bench_configs/); command-line options override it (default: none)")
    add("--model", help="Hugging Face id or local directory (comma-separated for several); default: demo, the embedded demo model")
    add("--preset", help="a dry run: a bench preset's shape with random weights instead of --model (no download; see "
        "`kvprune bench --help`), on made-up prompts at each task's published durations (or its data's, with "
        "--data-root) with answers of their lengths: memory, compilation and time before a checkpoint is fetched; "
        "scores are meaningless (default: none)")
    add("--tasks", help="comma-separated task names (see `kvprune tasks`) or task YAML files (paths ending in .yaml); "
        "default with the demo model: its four tasks")
    add("--limit", type=int, help="at most N samples per task, a fixed subset (default: all)")
    add("--data-root", type=Path, help="folder holding each task's data in its native layout (default with the demo model: its suite)")
    add("--device-map", help="accelerate device map, e.g. auto, to split a model over GPUs (default: none, the whole model on --device)")
    add("--trust-remote-code", action="store_true", help="run code shipped with the model (Aero-1 needs it); default: off")
    add("--max-new-tokens", type=int, help="tokens to generate per answer (default: each task's own)")
    add("--long-audio", choices=POLICIES, help="clips longer than the model takes as one audio item: split them into "
        "several clips, truncate them (the report warns), or record an error (default: split)")
    add("--protocol", choices=sorted(PROTOCOLS),
        help="run every task under this protocol (audiomarathon: AudioMarathon's scripts' conventions, see "
             "docs/protocols.md); default: each task's own")
    add("--judge", help="an LLM judge for judged grading: openai:<base URL>@<model> (an OpenAI-compatible endpoint; "
        "key from $KVPRUNE_JUDGE_API_KEY or ;key_env=NAME) or hf:<folder> (a local model); runs AVI-Bench's refine step "
        "and judged metrics (mmar_rubrics); judgements cached in <out>/judge_cache; an endpoint that gives no reply to "
        "5 tries in a row is asked nothing more in this sweep (default: none, judge-free scoring)")
    add("--no-audio", action="store_true", help="prompts without their audio, for ablations: audio segments left out "
        "(a task's caption in their place where it has one: STAR-Bench's caption-only, MMAR's text-only and caption "
        "inputs), videos without their sound; every press then has nothing to prune; such a folder holds no run with "
        "audio (default: off)")
    add("--retry-errors", action="store_true", help="rerun the runs recorded with an error; those the judge failed are "
        "graded again from their stored outputs (default: keep them)")
    add("--overwrite", action="store_true", help="discard the results already in --out instead of refusing a folder "
        "made with other settings (default: off)")
    add("--rehash-audio", action="store_true", help="read every audio file to digest its content, instead of trusting "
        "the folder's digest cache for files whose size, modification and status-change times are unchanged "
        "(default: trust it)")
    add("--no-plots", action="store_true", help="write summary.csv and report.md but no figures (default: figures too)")
    add("--batch-size", type=_batch_size, help="samples decoded together, each prefilled on its own (default: 1); "
        "answers do not depend on it (greedy tokens equal batch 1's; on a GPU in bfloat16 the report says how often they "
        "do); auto: the size `kvprune estimate` prices cheapest on this device (1, 8 or 32), said with why")
    add("--timing-samples", type=int, help="per task, the first N samples also run alone, without batching or "
        "sharing, for per-sample prefill and decode times (default: 4; 0: none); the report's timings and the "
        "score-vs-prefill figure use them, batched runs give throughput")
    add("--no-reuse-encoder", action="store_true", help="run the audio encoder in every run of a sample instead of "
        "once per sample (default: reuse it; exact: the same tensors)")
    add("--no-share-layers", action="store_true", help="run the embedding and decoder layers < K in every run of a "
        "sample instead of once for its token presses at K (default: share them; exact: the same tensors)")
    add("--compile-prefill", action=argparse.BooleanOptionalAction, help="kvprune's engine runs the prefill's decoder "
        "layers >= K compiled, or not (default: where its decoding compiles, on CUDA: 15-30 s once, then 1.1-1.2x "
        "faster unpruned prefills on an H100; not for the embedded demo model, whose short sweep never wins it back)")
    add_shared_options(
        parser,
        dict(methods=None, ratios=None, layer=None, out=None, device=None, dtype=None, attn_implementation=None,
             quiet=False, stock_encoder=False, cache=None),
        notes=dict(
            methods="default: every registered token-dropping press (built in: fastv, random, frame, dart); cache presses "
            "run only when named",
            ratios="fractions of audio tokens removed, in [0, 1); sorted, repeats dropped; default 0.1..0.9",
            out="rerunning the same command resumes it (default: kvprune-results; the demo's: kvprune-results/demo)",
            device="ignored with --device-map",
            dtype="default: auto, the dtype the checkpoint was saved in",
            attn_implementation="default: sdpa; pruning works under all three",
            cache="default: auto; each result records how it decoded, and whether the call compiled or captured a graph "
            "(such calls are timed again, warm, in the timing pass, and left out of timing statistics elsewhere, like "
            "the warm-up)",
        ),
    )
