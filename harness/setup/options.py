"""The command-line options ``kvprune sweep`` and ``kvprune bench`` share, each spelled and explained once.

A command adds the shared options it takes with ``add_shared_options(parser, defaults)``: the keys of
``defaults`` name the options (argparse destinations) and give the command's own default; ``notes``
append what only that command needs to say. Names, types, choices and help live here alone, so
``--attn-implementation eager`` means the same on both commands. An option whose flag is not its
setting's name says so (``flag``: ``--decoding`` sets ``cache``, as plan.json and every result row
record it); a renamed flag's old spelling still works, with a note (``RENAMED``). The checks of those options that
both commands make before anything is loaded or run are in ``device`` and ``methods``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
#: how decoding runs: engine (kvprune's generation engine), static or dynamic (stock generate on that cache); auto: engine
CACHES = ("auto", "engine", "static", "dynamic")
ENGINE_CACHE = "engine"
#: the audio encoder path: fast (kvprune.fast_audio_encoder) or the model's own (--stock-encoder)
ENCODERS = ("fast", "stock")

SHARED_OPTIONS: dict[str, dict] = {
    "methods": dict(
        metavar="SPECS",
        help="method specs, e.g. 'fastv,dart:budget=reference,frame+knorm:ratio=0.3' (presses: `kvprune presses`)",
    ),
    "ratios": dict(metavar="RATIOS", help="'0.1..0.9' (step 0.1), '0.1..0.9:0.2' or '0,0.5,0.9'"),
    "layer": dict(
        type=int,
        help="first decoder layer of every press that sets none (token presses drop tokens before it); "
        "default: each press's own (2 for token presses, 1 for cache presses)",
    ),
    "out": dict(type=Path, help="output folder"),
    "device": dict(help="e.g. cuda, cuda:1, cpu (default: cuda if available)"),
    "dtype": dict(choices=DTYPES, help="weights' dtype"),
    "attn_implementation": dict(choices=ATTN_IMPLEMENTATIONS, help="the model's attention backend"),
    "seed": dict(type=int, help="seed of the random inputs"),
    "quiet": dict(action="store_true", help="no progress bars; default: progress bars"),
    "cache": dict(
        flag="--decoding",
        choices=CACHES,
        help="how decoding runs: engine (kvprune's generation engine: static caches of the pruned lengths, on a GPU a "
        "compiled step replayed as a CUDA graph), static or dynamic (stock Hugging Face generate on its static "
        "cache, compiled on a GPU, or its dynamic cache); auto: engine",
    ),
    "stock_encoder": dict(
        action="store_true",
        help="run the model's stock audio encoder instead of kvprune.fast_audio_encoder (the same outputs, within "
        "bf16 rounding where the fast one compiles on a GPU; slower); default: the fast encoder",
    ),
}


#: flags renamed (old -> new): the old one still works, with a note on stderr. ``--cache`` named how decoding
#: runs (kvprune's engine, or stock generate on a static or dynamic cache), not a cache alone
RENAMED = {"--cache": "--decoding"}


class RenamedFlag(argparse.Action):
    """A flag's old spelling: sets the same setting, and says the new one on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"note: {option_string} is now {self.new} (the old name still works)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_shared_options(parser: argparse.ArgumentParser, defaults: dict[str, object], notes: dict[str, str] | None = None) -> None:
    """Add the shared options named by ``defaults`` (in the order of ``SHARED_OPTIONS``)."""
    unknown = sorted(set(defaults) - set(SHARED_OPTIONS))
    if unknown:
        raise ValueError(f"not shared options: {', '.join(unknown)}; shared: {', '.join(SHARED_OPTIONS)}")
    notes = notes or {}
    for dest, spec in SHARED_OPTIONS.items():
        if dest not in defaults:
            continue
        spec = dict(spec)
        flag = spec.pop("flag", f"--{dest.replace('_', '-')}")
        help_text = "; ".join(part for part in (spec["help"], notes.get(dest)) if part)
        parser.add_argument(flag, dest=dest, **dict(spec, help=help_text), default=defaults[dest])
        for old in (old for old, new in RENAMED.items() if new == flag):
            parser.add_argument(old, dest=dest, action=RenamedFlag, new=flag, choices=spec.get("choices"),
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def name_list(value) -> list[str]:
    """Names given as one comma-separated string (the command line) or as a list (a YAML file)."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return [str(name) for name in value]
