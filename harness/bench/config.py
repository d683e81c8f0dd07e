"""``kvprune bench``: pruned and unpruned prefill and decode side by side on one device, at real
model shapes and audio lengths, next to the ideal a pruning method could reach and the cost of scoring.

Three modes, each one run per preset and audio length, every request timed in interleaved rounds:

* ratios (default): kvprune unpruned, the ideal at each ratio (a real prefill whose layers >= K run
  on the kept length for free: ``bench/ideal.py``), then every method at every ratio: token-dropping,
  cache and composed presses alike (prefill, its LLM part, the press's own work, decoding, memory,
  KV cache). Any row faster than its ideal beyond noise is flagged.
* ``--batch-sizes 1,4,16``: unpruned and every method at every ratio at each batch size: requests/s,
  prefill and decoded tokens/s, peak memory; ``--largest-batch`` adds the largest batch that fits.
* ``--compare-stock``: stock Hugging Face (stock encoder; dynamic cache, then its static-cache
  compile), kvprune unpruned (fast encoder, compiled static decoding), each method at each ratio
  (the same), and the ideal: whole ``generate`` calls, the targets as ratios against the stock rows.

Decoding runs on a static cache, compiled on a GPU (``--decoding``: static on a GPU by default).
Models run with ``kvprune.fast_audio_encoder`` unless ``--stock-encoder`` is given. Results go to
``bench.csv``, ``bench.md`` and a figure, rewritten after every preset.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kvprune.press import Press
from kvprune.specs import MethodSpec

from ..setup.config import CommandConfig, unique_methods
from ..setup.options import add_shared_options, name_list
from ..setup.ratio_lists import parse_ratios
from .presets import PRESETS

MODES = ("ratios", "batch", "compare")
DEFAULT_METHODS = {"ratios": "fastv,random,frame,dart", "batch": "fastv", "compare": "fastv"}


@dataclass
class BenchConfig(CommandConfig):
    """What one bench run measures and how (the defaults are the command line's)."""

    presets: list[str] = field(default_factory=lambda: ["qwen2.5-omni-7b"])
    audio_seconds: list[float] = field(default_factory=lambda: [30.0, 120.0, 300.0])
    methods: list[MethodSpec] | str | None = None  # None: the mode's default (DEFAULT_METHODS)
    ratios: list[float] = field(default_factory=lambda: [0.5, 0.9])
    layer: int | None = None  # for every press without its own; None: each press's default
    decode_tokens: int = 32
    repeats: int = 5
    warmup: int = 2
    attn_implementation: str = "sdpa"
    encoder: str = "fast"  # fast: kvprune.fast_audio_encoder where it changes something; stock: the model's own
    cache: str = "auto"  # decoding's cache: static (compiled on a GPU), dynamic, auto (static on a GPU)
    batch_sizes: list[int] | None = None  # the batch mode's sizes; None: the ratios mode (batch 1)
    largest_batch: bool = False  # batch mode: also find the largest batch that fits (CUDA)
    compare_stock: bool = False  # the compare mode: stock Hugging Face beside kvprune
    compile: bool | None = None  # compile static-cache decoding; None: on CUDA only, as generate does
    compile_prefill: bool | str = "auto"  # the engine's prefill runs its layers >= K compiled; auto: its default
    compile_config: object = None  # a transformers CompileConfig; None: transformers' default (tests pass their own)
    device: str | None = None  # default: cuda if available, else cpu
    dtype: str = "auto"  # auto: bfloat16 on cuda, float32 on cpu
    out: Path | None = Path("bench_results")  # None: write nothing
    max_minutes: float | None = None  # stop starting runs after this long; the rest become error rows
    seed: int = 0
    command: str = ""
    progress: bool = True
    #: what runs: the press of each method label at each ratio, and K, where token dropping acts (None: no press drops tokens)
    presses: dict[tuple[str, float], Press] = field(init=False, repr=False)
    k: int | None = field(init=False)

    def normalise(self) -> None:
        """Lists from comma-separated text, each entry once (batch sizes sorted, ratios in the order given)."""
        self.presets = list(dict.fromkeys(name_list(self.presets)))
        self.audio_seconds = [float(s) for s in name_list(self.audio_seconds)]
        self.ratios = list(dict.fromkeys(parse_ratios(self.ratios)))
        if self.batch_sizes is not None:
            self.batch_sizes = sorted(set(int(b) for b in name_list(self.batch_sizes)))

    def validate(self) -> None:
        """Validate names early (before any model is built), then what runs: the presses and their K."""
        for name in self.presets:
            PRESETS.get(name)
        if self.compare_stock and self.batch_sizes is not None:
            raise ValueError("--compare-stock and --batch-sizes are separate runs: give one of them.")
        if self.batch_sizes is not None and (not self.batch_sizes or self.batch_sizes[0] < 1):
            raise ValueError(f"batch sizes {self.batch_sizes} are invalid: give positive sizes, e.g. --batch-sizes 1,4,16.")
        if self.largest_batch and self.batch_sizes is None:
            raise ValueError("--largest-batch predicts from the batch sizes measured: give --batch-sizes too.")
        self._check_amounts()
        self._check_lengths()
        self.check_shared()
        self.methods = unique_methods(DEFAULT_METHODS[self.mode] if self.methods is None else self.methods)
        if not self.methods:
            raise ValueError("no method to bench: give at least one (--methods).")
        self.audio_seconds = list(dict.fromkeys(self.audio_seconds))
        self.presses = {(m.label, r): m.build(r, self.layer) for m in self.methods for r in m.own_ratios or self.ratios}
        layers = sorted({part.layer for press in self.presses.values() for part in press.parts() if part.kind == "token"})
        if len(layers) > 1:
            raise ValueError(
                f"the bench compares every token-dropping press with one ideal at one layer K, but these drop tokens "
                f"at layers {', '.join(map(str, layers))}: give them the same layer (--layer)."
            )
        self.k = layers[0] if layers else None

    def _check_amounts(self) -> None:
        """Refuse lengths, token counts and time limits that would only fail later, request by request."""
        if not all(seconds > 0 for seconds in self.audio_seconds):
            raise ValueError(
                f"audio lengths {_joined(self.audio_seconds)} are invalid: give positive seconds, e.g. --audio-seconds 30,120."
            )
        least = 1 if self.compare_stock else 0  # generate decodes at least one token; a forward call may decode none
        if self.decode_tokens < least:
            raise ValueError(
                f"decode_tokens={self.decode_tokens} is invalid: give --decode-tokens {least} or more"
                + (" (--compare-stock times whole generate calls, which decode at least one token)." if least
                   else " (0: prefills only).")
            )
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(
                f"max_minutes={self.max_minutes:g} is invalid: give a positive number of minutes (--max-minutes), "
                "or leave it out for no limit."
            )

    def _check_lengths(self) -> None:
        """Refuse audio longer than a preset's model can hear: where its audio stops yielding more tokens
        (Gemma-3n's 30 s), a longer request would time the shorter clip under the longer length's name."""
        for name in self.presets:
            preset = PRESETS.get(name)
            longest = preset.family.prompting.max_clip_seconds
            beyond = [seconds for seconds in self.audio_seconds if longest is not None and seconds > longest]
            if not beyond:
                continue
            config, audio = preset.config(), preset.family.prompting.audio_format
            ceiling = audio.tokens(config, audio.frames(config, longest))
            for seconds in beyond:
                if audio.tokens(config, audio.frames(config, seconds)) <= ceiling:
                    raise ValueError(
                        f"{name} hears at most {longest:g} s of audio ({preset.family.prompting.long_audio}): --audio-seconds "
                        f"{seconds:g} would time {longest:g} s. Give {longest:g} or less for this preset."
                    )

    @property
    def mode(self) -> str:
        return "compare" if self.compare_stock else "batch" if self.batch_sizes is not None else "ratios"

    @classmethod
    def overrides(cls, args: argparse.Namespace) -> dict:
        return dict(
            presets=args.preset, audio_seconds=args.audio_seconds, methods=args.methods, ratios=args.ratios,
            layer=args.layer, decode_tokens=args.decode_tokens, repeats=args.repeats, warmup=args.warmup,
            attn_implementation=args.attn_implementation, encoder="stock" if args.stock_encoder else None,
            cache=args.cache, batch_sizes=args.batch_sizes, largest_batch=args.largest_batch,
            compare_stock=args.compare_stock, device=args.device, dtype=args.dtype, out=args.out,
            max_minutes=args.max_minutes, seed=args.seed, command=_command(getattr(args, "argv", None)),
            progress=not args.quiet, compile_prefill=args.compile_prefill,
        )


# -- command line ------------------------------------------------------------------------------------
def _joined(numbers: list[float]) -> str:
    return ",".join(f"{n:g}" for n in numbers)


def _command(argv: list[str] | None = None) -> str:
    """This run as a ``kvprune bench`` command, however it was started (``kvprune``, ``python -m`` or
    ``main(argv)``): ``argv`` are the command line's words, ``sys.argv[1:]`` when not given."""
    argv = sys.argv[1:] if argv is None else argv
    return shlex.join(["kvprune", "bench", *(argv[1:] if argv[:1] == ["bench"] else argv)])


def add_bench_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    default = BenchConfig.default
    add = parser.add_argument
    add("--preset", default=",".join(default("presets")), help=f"comma list of: {', '.join(PRESETS)} (default: %(default)s)")
    add("--audio-seconds", default=_joined(default("audio_seconds")),
        help="comma list of audio lengths in seconds (default: %(default)s)")
    add("--decode-tokens", type=int, default=default("decode_tokens"),
        help="forced tokens decoded after the prefill; 0: prefills only, except with --compare-stock (default: %(default)s)")
    add("--repeats", type=int, default=default("repeats"), help="timed rounds per request (median; default: %(default)s)")
    add("--warmup", type=int, default=default("warmup"),
        help="untimed rounds before them (they absorb compilation; default: %(default)s)")
    add("--max-minutes", type=float, default=default("max_minutes"),
        help="start no run after this many minutes (default: no limit)")
    add("--batch-sizes", help="batch mode: comma list of batch sizes, e.g. 1,4,16 (throughput at each); "
        "default: the ratios mode, batch 1")
    add("--largest-batch", action="store_true",
        help="batch mode: also find the largest batch that fits (CUDA); default: off")
    add("--compile-prefill", action=argparse.BooleanOptionalAction,
        help="kvprune's prefill runs its decoder layers >= K compiled, or not (Generator's compile_prefill; default: "
        "where its decoding compiles, on CUDA)")
    add("--compare-stock", action="store_true",
        help="compare mode: stock Hugging Face (dynamic and compiled static cache) beside kvprune unpruned and pruned, "
        "whole generate calls, with the targets (default: off)")
    add_shared_options(
        parser,
        dict(
            methods=None, ratios=_joined(default("ratios")), layer=default("layer"),
            out=default("out"), device=default("device"), dtype=default("dtype"),
            attn_implementation=default("attn_implementation"), seed=default("seed"), quiet=False, stock_encoder=False,
            cache=default("cache"),
        ),
        notes=dict(
            methods="token-dropping, cache and composed presses alike (default: "
            + "; ".join(f"{mode} mode {methods}" for mode, methods in DEFAULT_METHODS.items()) + ")",
            ratios="default: %(default)s",
            layer="token-dropping presses need one K for all",
            out="where bench.csv, bench.md and the figure go (default: %(default)s)",
            dtype="default: auto, bfloat16 on cuda and float32 on cpu",
            attn_implementation="default: %(default)s",
            seed="default: %(default)s",
            cache="default: %(default)s",
        ),
    )
    return parser
