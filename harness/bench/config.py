"""``kvprune bench``: pruned and unpruned prefill and decode side by side on one device, at real
model shapes and audio lengths, next to the ideal a pruning method could reach and the cost of scoring.

For each preset (a real architecture with random weights) and audio length, it measures the
unpruned request, then each press at each ratio, each as a prefill followed by forced decode steps:

* the ideal per ratio: the unpruned prefill with its decoder layers >= K timed on the full prompt
  replaced by the same layers timed on the kept prompt (the encoder, embedding, layers < K and the
  rest are what LLM-side pruning cannot touch);
* scoring: each press's whole selection on real-size tensors, and what AudioMarathon-style scores
  (an eager attention matrix) cost against kvprune's last-row scores.

Models run with ``kvprune.fast_audio_encoder`` unless ``--stock-encoder`` is given. Results go to
``bench.csv``, ``bench.md`` and ``prefill_vs_ratio.png``, rewritten after every preset.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kvprune.press import TokenDropPress
from kvprune.specs import MethodSpec, parse_methods

from ..options import add_shared_options
from ..sweep.ratios import parse_ratios
from .presets import PRESETS

DESCRIPTION = "time pruned against unpruned prefill and decode at real model shapes (random weights, one GPU)"


@dataclass
class BenchConfig:
    """What one bench run measures and how (the defaults are the command line's)."""

    presets: list[str] = field(default_factory=lambda: ["qwen2.5-omni-7b"])
    audio_seconds: list[float] = field(default_factory=lambda: [30.0, 120.0, 300.0])
    methods: list[MethodSpec] = field(default_factory=lambda: parse_methods("fastv,random,frame,dart"))
    ratios: list[float] = field(default_factory=lambda: [0.5, 0.9])
    layer: int | None = None  # for every press without its own; None: each press's default
    decode_tokens: int = 32
    repeats: int = 5
    warmup: int = 2
    attn_implementation: str = "sdpa"
    encoder: str = "fast"  # fast: kvprune.fast_audio_encoder where it changes something; stock: the model's own
    device: str | None = None  # default: cuda if available, else cpu
    dtype: str = "auto"  # auto: bfloat16 on cuda, float32 on cpu
    out: Path | None = Path("bench_results")  # None: write nothing
    max_minutes: float | None = None  # stop starting runs after this long; the rest become error rows
    seed: int = 0
    command: str = ""
    progress: bool = True
    #: what runs: the press of each method label at each ratio, and K, the layer where all of them act
    presses: dict[tuple[str, float], TokenDropPress] = field(init=False, repr=False)
    k: int = field(init=False)

    def __post_init__(self):
        """Validate names early (before any model is built) and drop repeated entries."""
        for name in self.presets:
            PRESETS.get(name)
        self.methods = list({method.label: method for method in parse_methods(self.methods)}.values())
        refused = [method.label for method in self.methods if method.kind != "token"]
        if refused:
            raise ValueError(
                f"kvprune bench times token-dropping presses only, for now; {', '.join(refused)} holds a cache press "
                "(benching cache and composed presses is planned): use those in `kvprune sweep`."
            )
        if self.encoder not in ("fast", "stock"):
            raise ValueError(f"encoder={self.encoder!r} is invalid: choose fast or stock (--stock-encoder).")
        self.presets = list(dict.fromkeys(self.presets))
        self.audio_seconds = list(dict.fromkeys(float(s) for s in self.audio_seconds))
        self.ratios = list(dict.fromkeys(parse_ratios(self.ratios)))
        if not self.methods:
            raise ValueError("no method to bench: give at least one (--methods).")
        self.presses = {(m.label, r): m.build(r, self.layer) for m in self.methods for r in self.ratios}
        layers = sorted({press.layer for press in self.presses.values()})
        if len(layers) > 1:
            raise ValueError(
                f"the bench compares every press with one ideal at one layer K, but these presses act at layers "
                f"{', '.join(map(str, layers))}: give them the same layer (--layer)."
            )
        self.k = layers[0]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BenchConfig:
        """The configuration ``kvprune bench`` was given (see ``add_bench_arguments``)."""
        return cls(
            presets=_list(args.preset),
            audio_seconds=[float(s) for s in _list(args.audio_seconds)],
            methods=args.methods,
            ratios=parse_ratios(args.ratios),
            layer=args.layer,
            decode_tokens=args.decode_tokens,
            repeats=args.repeats,
            warmup=args.warmup,
            attn_implementation=args.attn_implementation,
            encoder="stock" if args.stock_encoder else "fast",
            device=args.device,
            dtype=args.dtype,
            out=args.out,
            max_minutes=args.max_minutes,
            seed=args.seed,
            command=_command(),
            progress=not args.quiet,
        )


def run_bench(config: BenchConfig):
    """Run every preset x audio length x (unpruned, ideal, press x ratio): a ``pandas.DataFrame``
    with one row each, also written to ``config.out`` after every preset (unless it is None)."""
    from .run import run_presets  # models, pandas and matplotlib load only when a bench runs

    return run_presets(config)


# -- command line ------------------------------------------------------------------------------------
def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _joined(numbers: list[float]) -> str:
    return ",".join(f"{n:g}" for n in numbers)


def _command() -> str:
    """This run as a ``kvprune bench`` command, however it was started (``kvprune`` or ``python -m``)."""
    argv = sys.argv[1:]
    return shlex.join(["kvprune", "bench", *(argv[1:] if argv[:1] == ["bench"] else argv)])


def add_bench_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    defaults = BenchConfig()
    add = parser.add_argument
    add("--preset", default=",".join(defaults.presets), help=f"comma list of: {', '.join(PRESETS)}")
    add("--audio-seconds", default=_joined(defaults.audio_seconds), help="comma list of audio lengths in seconds")
    add("--decode-tokens", type=int, default=defaults.decode_tokens, help="forced tokens decoded after the prefill")
    add("--repeats", type=int, default=defaults.repeats, help="timed runs per measurement (median)")
    add("--warmup", type=int, default=defaults.warmup, help="untimed runs before them")
    add("--max-minutes", type=float, default=None, help="start no run after this many minutes")
    add_shared_options(
        parser,
        dict(
            methods=",".join(m.label for m in defaults.methods), ratios=_joined(defaults.ratios), layer=defaults.layer,
            out=defaults.out, device=defaults.device, dtype=defaults.dtype,
            attn_implementation=defaults.attn_implementation, seed=defaults.seed, quiet=False, stock_encoder=False,
        ),
        notes=dict(
            methods="token-dropping presses only, for now (default: %(default)s)",
            ratios="default: %(default)s",
            layer="the bench needs one K for all",
            out="where bench.csv, bench.md and prefill_vs_ratio.png go (default: %(default)s)",
            dtype="default: auto, bfloat16 on cuda and float32 on cpu",
            attn_implementation="default: %(default)s",
            seed="default: %(default)s",
        ),
    )
    return parser
