"""One call of ``generate`` as a checked request (``GenerateRequest``), what it returns (``GenerationOutput``),
and what instruments may watch of it (``GenerationObserver``).

What ``generate`` and ``Generator`` accept is checked before any work, each mistake named with what to
give instead: the model (a module of a supported family, or the ``LoadedModel`` that ``load_model``
returns), the press (a ``Press``, a registered press's name as ``get_press`` takes it, or None; the call's
``ratio`` is applied to it here, once) and the inputs (the model inputs of a prompt batch, as
``LoadedModel.build_inputs`` or the model's processor returns them, or a list of such batches)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from ..models.loading import LoadedModel
from ..press import PRESSES, Press, get_press
from .step import Sampling
from .timing import Timing

ENGINE, FALLBACK = "kvprune", "transformers.generate"


@dataclass
class GenerationOutput:
    sequences: torch.Tensor  # (B, prompt + new): the prompt followed by the new tokens, as generate returns
    new_tokens: torch.Tensor  # (B, new)
    timing: Timing  # the call's seconds and cache (``kv_cache_bytes``: the decode state's buffers, its room included)
    outcome: object | None = None  # the press's PressOutcome (what its prefill pruned)
    engine: str = ENGINE  # which path decoded: kvprune's engine, or transformers.generate (and why, in ``note``)
    note: str = ""
    first_prefill_s: float = 0.0  # the first batch's prefill alone (within ``timing.prefill_s``)
    capture_s: float = 0.0  # between prefill and decoding: capturing the decode step's CUDA graph (and compiling
    # it) when this call met a new state; the token loop's time, ``timing.decode_s``, is after it
    graphs_captured: int = 0  # CUDA graphs this call captured (0: replayed existing ones, or none used)
    compilations: int = 0  # torch.compile graphs this call made
    new_state: bool = False  # this call allocated its decode state (False: it refilled one kept from an earlier call)
    step_compiled: bool | None = None  # its decoding ran a compiled step (None: no decoding step; see ``fallbacks``)
    compiled_in_timing: bool = False  # it compiled or captured inside ``timing``'s spans (the prefill, the token
    # loop), so those times include it; a new state's capture before the loop (``capture_s``) does not count


def model_of(model) -> nn.Module:
    """The model a generator runs: ``model`` itself, or a ``LoadedModel``'s."""
    return model.model if isinstance(model, LoadedModel) else model


def press_of(press, ratio: float | None = None) -> Press | None:
    """``press`` as a Press at ``ratio`` (None: its own): a registered press's name is built with its
    defaults; anything else but a Press or None is a mistake named here. No press: no ratio to apply."""
    if press is None:
        return None
    if isinstance(press, str):
        if press not in PRESSES:
            raise ValueError(f"press={press!r} is not a registered press: give one of {', '.join(PRESSES.names())} "
                             "(kvprune.list_presses()), or a Press such as kvprune.FastVPress(layer=2).")
        press = get_press(press)
    if not isinstance(press, Press):
        raise TypeError(f"press must be a Press (kvprune.FastVPress(...)), a registered press's name or None, "
                        f"not {type(press).__name__}.")
    return press if ratio is None else press.with_ratio(ratio)


def batches_of(inputs) -> list[Mapping]:
    """``inputs`` as a list of prompt batches, each the model inputs of one or more prompts (holding
    ``input_ids``); a TypeError says what ``inputs`` must be (a waveform is not model inputs)."""
    batches = [inputs] if isinstance(inputs, Mapping) else list(inputs) if isinstance(inputs, (list, tuple)) else None
    if batches == []:
        raise ValueError("inputs is an empty list: give a batch of model inputs, or a list of them.")
    if batches is None or not all(isinstance(b, Mapping) and isinstance(b.get("input_ids"), torch.Tensor) for b in batches):
        shown = type(inputs).__name__ if batches is None else ", ".join(sorted({type(b).__name__ for b in batches}))
        raise TypeError(
            f"inputs must be the model inputs of a prompt (a dict holding input_ids, as loaded.build_inputs(waves, "
            f"prompt) or the model's processor returns them) or a list of such dicts, not {shown}: a waveform goes "
            "into loaded.build_inputs([wave], prompt) first."
        )
    return batches


class GenerationObserver:
    """What an instrument (a profiler, the bench's probes) sees of one generation call: each method is called
    on the host at its point of the call and does nothing here; subclass it, override what you need and
    pass it as ``generate(..., observer=...)``. The engine calls these and nothing else (no patching)."""

    def press_installed(self, press) -> None:
        """A prefill's press (at the call's ratio) has its hooks on the model; its forward is not yet called."""

    def prefill_ended(self) -> None:
        """A prefill's forward is queued (once per prefill; on the stock path, the end of ``generate``'s first forward)."""

    def decoding_started(self) -> None:
        """Decoding begins: the engine's, before its decode step is prepared (compiled, captured); stock
        ``generate``'s, right after its prefill."""

    def decoding_ended(self) -> None:
        """Every decoding step is queued."""


@dataclass(frozen=True)
class GenerateRequest:
    """One call of ``Generator.generate``, checked: what it prefills, under which press, how it chooses
    tokens and when rows stop. Each value is set once, here."""

    batches: tuple[Mapping, ...]  # the prompt batches, in the order of the output's rows
    press: Press | None  # at the call's ratio
    max_new_tokens: int
    sampling: Sampling = Sampling()
    eos: tuple[int, ...] = ()  # tokens that end a row
    pad: int = 0  # the token an ended row emits
    suppress_tokens: tuple[int, ...] = ()  # tokens never chosen
    observer: GenerationObserver = field(default_factory=GenerationObserver)
    decode_rows: int = 0  # rows of the decode state at least (``Generator.generate``)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} is invalid: generate at least 1 token.")
        if self.decode_rows < 0:
            raise ValueError(f"decode_rows={self.decode_rows} is invalid: give a number of rows >= 0 (or None).")

    @property
    def prefills(self) -> list[tuple[Mapping, int]]:
        """Each batch to prefill, with how many times in a row it was given: a batch given again as the same
        object (``[inputs] * 16``: sixteen answers to one prompt) is prefilled once and its rows loaded that
        many times, each drawing its own tokens."""
        runs: list[tuple[Mapping, int]] = []
        for batch in self.batches:
            if runs and runs[-1][0] is batch:
                runs[-1] = (batch, runs[-1][1] + 1)
            else:
                runs.append((batch, 1))
        return runs

    @property
    def rows(self) -> int:
        return sum(batch["input_ids"].shape[0] for batch in self.batches)

    @property
    def longest(self) -> int:
        """The longest prompt (padded) of the call."""
        return max(batch["input_ids"].shape[1] for batch in self.batches)
