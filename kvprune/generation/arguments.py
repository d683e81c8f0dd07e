"""What ``generate`` and ``Generator`` accept, checked before any work, each mistake named with what to
give instead: the model (a module of a supported family, or the ``LoadedModel`` that ``load_model``
returns), the press (a ``Press``, a registered press's name as ``get_press`` takes it, or None) and the
inputs (the model inputs of a prompt batch, as ``LoadedModel.build_inputs`` or the model's processor
returns them, or a list of such batches)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn as nn

from ..models.loading import LoadedModel
from ..press import PRESSES, Press, get_press


def model_of(model) -> nn.Module:
    """The model a generator runs: ``model`` itself, or a ``LoadedModel``'s."""
    return model.model if isinstance(model, LoadedModel) else model


def press_of(press) -> Press | None:
    """``press`` as a Press: a registered press's name is built with its defaults (the call's
    ``ratio`` still applies); anything else but a Press or None is a mistake named here."""
    if press is None or isinstance(press, Press):
        return press
    if isinstance(press, str):
        if press not in PRESSES:
            raise ValueError(f"press={press!r} is not a registered press: give one of {', '.join(PRESSES.names())} "
                             "(kvprune.list_presses()), or a Press such as kvprune.FastVPress(layer=2).")
        return get_press(press)
    raise TypeError(f"press must be a Press (kvprune.FastVPress(...)), a registered press's name or None, "
                    f"not {type(press).__name__}.")


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
