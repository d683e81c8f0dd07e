"""The command-line options ``kvprune sweep`` and ``kvprune bench`` share, each spelled and explained once.

A command adds the shared options it takes with ``add_shared_options(parser, defaults)``: the keys of
``defaults`` name the options (argparse destinations) and give the command's own default; ``notes``
append what only that command needs to say. Names, types, choices and help live here alone, so
``--attn-implementation eager`` means the same on both commands. ``check_device`` and ``check_presses``
are the checks of those options that both commands make before anything is loaded or run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn as nn

from kvprune.press_plan import validate_press
from kvprune.press import Press

DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
#: the KV cache decoding runs on: auto is static on a GPU (where generate compiles the decode step), else dynamic
CACHES = ("auto", "static", "dynamic")

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
        choices=CACHES,
        help="KV cache of decoding: static (Hugging Face's static cache; on a GPU the decode step is compiled, "
        "and a call at a new length may compile), dynamic, or auto: static on a GPU, dynamic elsewhere",
    ),
    "stock_encoder": dict(
        action="store_true",
        help="run the model's stock audio encoder instead of kvprune.fast_audio_encoder (same outputs, slower); "
        "default: the fast encoder",
    ),
}


def add_shared_options(parser: argparse.ArgumentParser, defaults: dict[str, object], notes: dict[str, str] | None = None) -> None:
    """Add the shared options named by ``defaults`` (in the order of ``SHARED_OPTIONS``)."""
    unknown = sorted(set(defaults) - set(SHARED_OPTIONS))
    if unknown:
        raise ValueError(f"not shared options: {', '.join(unknown)}; shared: {', '.join(SHARED_OPTIONS)}")
    notes = notes or {}
    for dest, spec in SHARED_OPTIONS.items():
        if dest not in defaults:
            continue
        help_text = "; ".join(part for part in (spec["help"], notes.get(dest)) if part)
        parser.add_argument(f"--{dest.replace('_', '-')}", **dict(spec, help=help_text), default=defaults[dest])


def name_list(value) -> list[str]:
    """Names given as one comma-separated string (the command line) or as a list (a YAML file)."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return [str(name) for name in value]


def check_device(device: str | None) -> None:
    """Refuse a ``--device`` that torch cannot read or this machine does not have, before a model is
    loaded (torch would say so only when the first tensor moves there, after minutes of loading)."""
    if device is None:
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device {device!r} is not a device: give e.g. cpu, cuda or cuda:1.") from None
    if parsed.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {device}: this machine has no CUDA device (torch {torch.__version__} built without CUDA "
            "or no GPU visible); use --device cpu."
        )
    count = torch.cuda.device_count()
    if parsed.index is not None and parsed.index >= count:
        raise ValueError(
            f"--device {device}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}; give one of them."
        )


def check_presses(model: nn.Module, model_name: str, presses: dict[tuple[str, float], Press], static: bool = False) -> None:
    """Every press (by its method's label and ratio) against ``model``, and with ``static`` against the
    static cache decoding runs on: a layer out of range or presses that cannot run together stop a
    command before its first run, not once per sample or request."""
    for (label, ratio), press in presses.items():
        for on_static in (False, True) if static else (False,):
            try:
                validate_press(model, press, static=on_static)
            except (ValueError, NotImplementedError) as error:
                fix = " On the command line: --cache dynamic." if on_static else ""
                raise ValueError(f"method {label} (ratio {ratio:g}) cannot run on {model_name}: {error}{fix}") from None


def resolve_cache(choice: str, device) -> str:
    """The cache ``--cache`` asks for on ``device``: "static" or "dynamic" (auto: static on CUDA)."""
    if choice not in CACHES:
        raise ValueError(f"cache={choice!r} is invalid: choose one of {', '.join(CACHES)}.")
    if choice == "auto":
        return "static" if torch.device(device).type == "cuda" else "dynamic"
    return choice
