"""The decode step's cases for the scripts that time it apart from the bench (``scripts/profile_decode_step.py``,
``scripts/ab_decode_step.py``): ``kvprune bench``'s methods at each batch size, decoded by kvprune's ``Generator``
on a bench preset's model and prompt, every row the same prompt and no row ending early."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from kvprune.models import resolve_family
from kvprune.specs import MethodSpecError, parse_methods

from ..setup.options import name_list
from .presets import PRESETS


def parse_cases(methods: str, batch_sizes: str, ratio: float) -> list[tuple[str, object, int]]:
    """(label, press or None, rows) for every method at every batch size, in the order given; the methods are
    ``kvprune bench``'s (parsed by ``parse_methods``, so a press's own parameters may hold commas), ``none`` the
    unpruned model; a method's own ratio wins over ``ratio``."""
    try:
        sizes = [int(size) for size in name_list(batch_sizes)]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise SystemExit(f"--batch-sizes {batch_sizes!r}: write positive whole numbers, comma-separated, e.g. 16,64")
    presses = []
    for i, between in enumerate(re.split(r"(?:^|,)\s*none\s*(?=,|$)", methods)):  # the text around each "none"
        if i:
            presses.append(("none", None))
        try:
            parsed = parse_methods(between) if between.strip(", ") else []
        except MethodSpecError as error:
            raise SystemExit(f"--methods: {error}") from None
        presses += [(method.label, method.build((method.own_ratios or (ratio,))[0])) for method in parsed]
    return [(label, press, rows) for label, press in presses for rows in sizes]


def add_case_arguments(parser: argparse.ArgumentParser, methods: str, batch_sizes: str) -> None:
    """The options every such script takes: where to write, the cases (``parse_cases``) and the model (``StepModel``)."""
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--methods", default=methods, help="kvprune bench's methods, comma-separated (none: unpruned)")
    parser.add_argument("--batch-sizes", default=batch_sizes, help="rows decoded together, comma-separated")
    parser.add_argument("--preset", default="qwen2.5-omni-7b", help="a bench preset's name")
    parser.add_argument("--seconds", type=float, default=300, help="audio seconds in the prompt")
    parser.add_argument("--ratio", type=float, default=0.9, help="the ratio of methods that set none")
    parser.add_argument("--tiny", action="store_true", help="the tiny-omni preset on the CPU in float32")


@dataclass
class StepModel:
    """A preset's model and one prompt of ``seconds`` of audio: on the GPU in bf16, or (``tiny``) the tiny-omni
    preset on the CPU in float32."""

    preset: object
    model: torch.nn.Module
    prompt: object
    suppress: list[int]

    @classmethod
    def build(cls, preset_name: str, seconds: float, tiny: bool) -> "StepModel":
        cuda = not tiny
        preset = PRESETS.get("tiny-omni" if tiny else preset_name)
        model = preset.build(torch.device("cuda" if cuda else "cpu"), torch.bfloat16 if cuda else torch.float32, "sdpa")
        prompt = preset.prompt(model, seconds, decode_tokens=1)
        return cls(preset, model, prompt, [resolve_family(model).audio_token_id(model)])

    def generate(self, generator, press, rows: int, tokens: int):
        """``rows`` copies of the prompt, ``tokens`` new tokens each (no end token, the audio token never chosen)."""
        return generator.generate([self.prompt.inputs] * rows, max_new_tokens=tokens, press=press, eos_token_id=[],
                                  suppress_tokens=self.suppress, pad_token_id=0)


def step_ms(out) -> float:
    """A call's milliseconds per decode step, from the engine's own timing (the first token comes from the prefill)."""
    return 1000 * out.timing.decode_s / (out.new_tokens.shape[1] - 1)


def file_label(label: str) -> str:
    """``label`` as a file name's part: letters, digits and ``_.+-`` only."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", label)
