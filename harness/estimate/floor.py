"""The compute floor: no run can take less time than its matrix products at the device's measured
matrix rate. An estimate whose measured call beats it has timed something other than the sweep's
work (the same prompt prefilled once for a whole batch, say), and stops with an error naming the task.

The floor counts what a run must compute whatever it shares: the decoder layers' linear projections
(``2 x parameters`` per token) over the tokens each layer holds (all of the prompt before a
token-dropping press's layer K, its kept tokens from K on; the layers before K only where nothing can
be shared: the unpruned run), and each decoding step's over its rows; attention, the audio encoder
and the language-model head are left out, so it is below the truth, never above. The rate is the
median of timed square matrix products in the model's dtype (the bench's measure) on the model's device (on a CPU, on the
threads the sweep runs the model on).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from kvprune.models import resolve_family

from ..bench.measure import Meter
from ..bench.roofline import gemm_tflops
from .timing import Call


class BelowFloorError(RuntimeError):
    """A measured run took less time than its matrix products can."""


def matrix_rate(device: torch.device, dtype: torch.dtype) -> float:
    """Floating-point operations per second of a large square matrix product on ``device`` in ``dtype``, as
    the bench measures it (``roofline.gemm_tflops``)."""
    return 1e12 * gemm_tflops(Meter(device, 0, 1), dtype)


def layer_parameters(model: nn.Module) -> tuple[int, int]:
    """(decoder layers, linear weights' parameters per layer on average)."""
    layers = resolve_family(model).layers(model)
    weights = sum(p.numel() for layer in layers for p in layer.parameters() if p.dim() == 2)
    return len(layers), weights // max(1, len(layers))


def floor_seconds(call: Call, press, layers: int, per_layer: int, rate: float) -> float:
    """The least time ``call`` (its rows under ``press``, None: unpruned) can take at ``rate``."""
    k = getattr(press, "layer", None) if press is not None and getattr(press, "kind", None) == "token" else None
    tokens = 0
    for prompt, audio, kept in zip(call.prompt_tokens, call.audio_tokens, call.kept_tokens):
        if press is None:
            tokens += layers * prompt
        elif k is not None and kept is not None:
            tokens += (layers - k) * (prompt - audio + kept)  # layers < K may be shared: left out
        else:
            tokens += layers * (prompt - audio)  # a cache press: at least the text in every layer
        tokens += layers * max(0, call.generated - 1)
    return 2 * per_layer * tokens / rate


def check_floor(calls: list[Call], presses: list, task: str, layers: int, per_layer: int, rate: float) -> None:
    """Stop at the first call faster than its floor, naming the task and what was measured."""
    for call in calls:
        floor = floor_seconds(call, presses[call.run], layers, per_layer, rate)
        if call.seconds < floor:
            raise BelowFloorError(
                f"task {task}: a {call.context.get('mode')} call of {call.rows} row(s) took {call.seconds * 1e3:.2f} ms, "
                f"below its compute floor of {floor * 1e3:.2f} ms (its matrix products at the measured "
                f"{rate / 1e12:.2f} TFLOP/s): the estimate did not time the sweep's work; please report this."
            )
