"""The Press API: ``with press(model, ratio=0.5): model.generate(**inputs)``.

A press is a small dataclass. Token-dropping presses only decide *which* audio tokens of a clip to
keep (``select``); cache presses only *score* a layer's cached audio entries (``score``). The engine
(``kvprune.engine``) does everything else, identically for all of them, and runs several presses
at once when they are composed (``ComposedPress``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn as nn

from .clips import AudioClip
from .ratios import validate_ratio


@dataclass(frozen=True)
class PruneStats:
    """Audio tokens in one batch row's prompt, and how many of them the press kept."""

    audio_tokens: int
    kept_tokens: int


@dataclass
class Press:
    """Base of all presses: calling one on a model returns a context manager."""

    def __call__(self, model: nn.Module, ratio: float | None = None):
        """Install the press on ``model`` for a ``with`` block; ``ratio`` sets ``self.ratio`` first."""
        from .engine import PressSession

        if ratio is not None:
            self.ratio = ratio
        for press in self.parts():
            press.ratio = validate_ratio(press.ratio)
        return PressSession(model, self.parts())

    def parts(self) -> list["Press"]:
        return [self]


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
    stats: list[PruneStats] = field(default_factory=list, init=False, repr=False, compare=False)
    _outcome: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _kept_positions: list[torch.Tensor] | None = field(default=None, init=False, repr=False, compare=False)

    #: what ``select`` reads from the evidence of layer K-1: "attention", "keys", "hidden"
    needs: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        self.ratio = validate_ratio(self.ratio)

    def select(self, clip: AudioClip, evidence) -> torch.Tensor:
        """Indices (into the prompt tensor) of the ``clip.n_keep`` tokens of ``clip`` to keep, on the
        evidence's device, distinct and inside ``[clip.start, clip.end)``. Avoid reading values back
        to the host: it would stall the GPU in the middle of the prefill (see ``Evidence``)."""
        raise NotImplementedError

    @property
    def kept_positions(self) -> list[torch.Tensor]:
        """Per row, the sorted prompt positions (left padding not counted) of the audio tokens kept."""
        if self._kept_positions is None and self._outcome is not None:
            self._kept_positions = [self._positions(*row) for row in zip(*self._outcome)]
        return self._kept_positions or []

    def _record(self, clips: list[list[AudioClip]], kept: list[list[torch.Tensor]], offsets) -> None:
        """Store the outcome of a prefill. Counts come from shapes; positions are read back from the
        device only when asked for, after the prefill."""
        self.stats = [
            PruneStats(audio_tokens=sum(c.length for c in row_clips), kept_tokens=sum(len(k) for k in row_kept))
            for row_clips, row_kept in zip(clips, kept)
        ]
        self._outcome = (clips, kept, offsets)
        self._kept_positions = None

    def _positions(self, clips, kept, offsets) -> torch.Tensor:
        for clip, indices in zip(clips, kept):
            indices = indices.cpu()
            if len(indices) and (indices.min() < clip.start or indices.max() >= clip.end or len(indices.unique()) != len(indices)):
                raise RuntimeError(
                    f"{type(self).__name__}.select returned positions outside clip [{clip.start}, {clip.end}) or duplicates."
                )
        indices = torch.cat(kept).cpu() if kept else torch.zeros(0, dtype=torch.long)
        return offsets.gather(0, indices).sort().values


@dataclass
class CachePress(Press):
    """Compresses each decoder layer's KV cache after its prefill, among audio entries only.

    Text and special tokens are never evicted. Each layer from ``first_layer`` on keeps, per row,
    ``max(1, round(n * (1 - ratio)))`` of the ``n`` audio entries it holds (after any token dropping),
    the highest-scoring ones, with one choice shared by all heads. The prefill itself is unchanged
    (it already ran); later tokens attend to the compressed cache.

    After a prefill, ``layer_stats[j][b]`` counts audio entries and kept entries of layer j, row b.
    """

    ratio: float = 0.0
    first_layer: int = 1
    layer_stats: dict[int, list[PruneStats]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.ratio = validate_ratio(self.ratio)

    def score(self, layer_idx: int, keys: torch.Tensor, values: torch.Tensor, is_audio: torch.Tensor) -> torch.Tensor:
        """Importance of each cached entry, (B, L); higher is kept. ``keys``: (B, kv_heads, L, head_dim)."""
        raise NotImplementedError

    def _reset(self) -> None:
        self.layer_stats = {}

    def _record_layer(self, layer_idx: int, audio: list[int], kept: list[int]) -> None:
        self.layer_stats[layer_idx] = [PruneStats(a, k) for a, k in zip(audio, kept)]


@dataclass
class ComposedPress(Press):
    """Several presses at once: at most one token-dropping press plus any number of cache presses.

    ``ComposedPress([DARTPress(ratio=0.5), KNormPress(ratio=0.3)])`` drops half the audio tokens at
    layer K, then evicts 30% of the remaining audio entries from every layer's cache.
    """

    presses: list[Press] = field(default_factory=list)

    def __call__(self, model: nn.Module, ratio: float | None = None):
        if ratio is not None:
            raise ValueError("a ComposedPress has no single ratio: set the ratio of each of its presses.")
        return super().__call__(model)

    def parts(self) -> list[Press]:
        return [part for press in self.presses for part in press.parts()]


_PRESSES: dict[str, type[Press]] = {}


def register_press(name: str):
    """Class decorator: make a press available by name to ``get_press`` and the CLI."""

    def decorate(cls):
        cls.name = name
        _PRESSES[name] = cls
        return cls

    return decorate


PRESS_KINDS = {"token": TokenDropPress, "cache": CachePress}


def list_presses(kind: str | None = None) -> list[str]:
    """Registered press names; ``kind="token"`` or ``"cache"`` keeps one kind."""
    if kind is None:
        return list(_PRESSES)
    if kind not in PRESS_KINDS:
        raise ValueError(f"kind={kind!r} is invalid; choose one of {', '.join(PRESS_KINDS)}.")
    return [name for name, cls in _PRESSES.items() if issubclass(cls, PRESS_KINDS[kind])]


def get_press(name: str, **kwargs) -> Press:
    """Build a press by name, e.g. ``get_press("fastv", ratio=0.5, layer=3)``."""
    try:
        cls = _PRESSES[name]
    except KeyError:
        raise ValueError(f"unknown press {name!r}; available: {', '.join(_PRESSES)}") from None
    return cls(**kwargs)
