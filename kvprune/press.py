"""The Press API: ``with press(model, ratio=0.5): model.generate(**inputs)``.

A press is a small dataclass. Token-dropping presses only decide *which* audio tokens of a clip to
keep (``select``); the engine (``kvprune.engine``) does everything else, identically for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn as nn

from .audio_spans import AudioClip, validate_ratio


@dataclass(frozen=True)
class PruneStats:
    """Audio tokens in one batch row's prompt, and how many of them the press kept."""

    audio_tokens: int
    kept_tokens: int

    @property
    def kept_fraction(self) -> float:
        return self.kept_tokens / self.audio_tokens if self.audio_tokens else 1.0


@dataclass
class Press:
    """Base of all presses. Calling a press on a model returns a context manager."""

    def __call__(self, model: nn.Module, ratio: float | None = None):
        raise NotImplementedError


@dataclass
class TokenDropPress(Press):
    """Drops audio tokens from the hidden states before decoder layer ``layer`` (K).

    ``ratio`` is the fraction of each clip's audio tokens removed, in [0, 1); each clip keeps
    ``max(1, round(n * (1 - ratio)))``. Layers 0..K-1 see the full prompt; layers K.. and their KV
    cache hold only the kept tokens, at their original positions.

    After a prefill, ``kept_positions[b]`` holds the kept audio tokens' positions in row b's prompt
    (left padding not counted) and ``stats[b]`` their counts.
    """

    ratio: float = 0.0
    layer: int = 2
    kept_positions: list[torch.Tensor] = field(default_factory=list, init=False, repr=False, compare=False)
    stats: list[PruneStats] = field(default_factory=list, init=False, repr=False, compare=False)

    #: what ``select`` reads from the evidence of layer K-1: "attention", "keys", "hidden"
    needs: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        self.ratio = validate_ratio(self.ratio)

    def __call__(self, model: nn.Module, ratio: float | None = None):
        """Install the press on ``model`` for a ``with`` block; ``ratio`` sets ``self.ratio`` first."""
        from .engine import PressSession

        if ratio is not None:
            self.ratio = ratio
        self.ratio = validate_ratio(self.ratio)
        return PressSession(model, self)

    def select(self, clip: AudioClip, evidence) -> torch.Tensor:
        """Indices (into the prompt tensor) of the ``clip.n_keep`` tokens of ``clip`` to keep."""
        raise NotImplementedError

    def _record(self, clips: list[list[AudioClip]], kept: list[list[torch.Tensor]], offsets) -> None:
        """Store the outcome of a prefill: kept positions per row (padding not counted) and counts."""
        self.kept_positions, self.stats = [], []
        for row_clips, row_kept, row_offsets in zip(clips, kept, offsets):
            indices = torch.cat(row_kept).cpu() if row_kept else torch.zeros(0, dtype=torch.long)
            self.kept_positions.append(row_offsets.gather(0, indices).sort().values)
            self.stats.append(
                PruneStats(audio_tokens=sum(c.length for c in row_clips), kept_tokens=len(indices))
            )


_PRESSES: dict[str, type[TokenDropPress]] = {}


def register_press(name: str):
    """Class decorator: make a press available by name to ``get_press`` and the CLI."""

    def decorate(cls):
        cls.name = name
        _PRESSES[name] = cls
        return cls

    return decorate


def list_presses() -> list[str]:
    return list(_PRESSES)


def get_press(name: str, **kwargs) -> TokenDropPress:
    """Build a press by name, e.g. ``get_press("fastv", ratio=0.5, layer=3)``."""
    try:
        cls = _PRESSES[name]
    except KeyError:
        raise ValueError(f"unknown press {name!r}; available: {', '.join(_PRESSES)}") from None
    return cls(**kwargs)
