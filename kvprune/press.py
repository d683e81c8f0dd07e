"""The Press API: ``with press(model, ratio=0.5) as run: model.generate(**inputs)``.

A press is configuration: a small frozen dataclass that calling never changes. Token-dropping
presses only decide *which* audio tokens of a clip to keep (``select``); cache presses only *score*
a layer's cached audio entries (``score``). The engine (``kvprune.engine``) does everything else,
identically for all of them, runs several presses at once when they are composed
(``ComposedPress``), and hands what was pruned to the ``with`` block as a ``PressRun``.

Writing a press (see the README): subclass ``TokenDropPress`` or ``CachePress`` as a frozen
dataclass and register it by name, in this order::

    @register_press("first")
    @dataclass(frozen=True)
    class FirstPress(TokenDropPress):
        def select(self, clip, evidence):
            return clip.positions(evidence.is_audio.device)[: clip.n_keep]  # the first tokens of each clip

A package can register presses without being imported by hand, through the entry-point group
``kvprune.presses`` (``[project.entry-points."kvprune.presses"] first = "mypkg:FirstPress"``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from .clips import AudioClip
from .engine import PressSession
from .ratios import validate_ratio
from .registry import Registry


@dataclass(frozen=True)
class Press:
    """Base of all presses: calling one on a model returns a context manager that yields a ``PressRun``.

    Every press has ``layer``, the first decoder layer it acts on, and ``kind``: "token", "cache"
    or "composed". The engine reads ``kind``, ``ratio``, ``layer`` and ``needs`` and calls
    ``parts()``, ``select()`` and ``score()``; nothing else.
    """

    kind: ClassVar[str]
    #: what a token-dropping press's ``select`` reads from the evidence of layer K-1: "attention", "keys", "hidden"
    needs: ClassVar[frozenset[str]] = frozenset()

    def __call__(self, model: nn.Module, ratio: float | None = None) -> PressSession:
        """This press on ``model`` for one ``with`` block; ``ratio``, when given, is used instead of
        ``self.ratio`` (by a copy: the press itself never changes)."""
        press = self if ratio is None else dataclasses.replace(self, ratio=ratio)
        return PressSession(model, press)

    def parts(self) -> tuple[Press, ...]:
        """The single presses the engine runs: this one, or the members of a composition."""
        return (self,)


@dataclass(frozen=True)
class TokenDropPress(Press):
    """Drops audio tokens from the hidden states before decoder layer ``layer`` (K).

    ``ratio`` is the fraction of each clip's audio tokens removed, in [0, 1); each clip keeps
    ``max(1, round(n * (1 - ratio)))``. Layers 0..K-1 see the full prompt; layers K.. and their KV
    cache hold only the kept tokens, at their original positions.
    """

    ratio: float = 0.0
    layer: int = 2

    kind: ClassVar[str] = "token"

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", validate_ratio(self.ratio))

    def select(self, clip: AudioClip, evidence) -> torch.Tensor:
        """Indices (into the prompt tensor) of the ``clip.n_keep`` tokens of ``clip`` to keep, on the
        evidence's device, distinct and inside ``[clip.start, clip.end)``. Avoid reading values back
        to the host: it would stall the GPU in the middle of the prefill (see ``Evidence``)."""
        raise NotImplementedError


@dataclass(frozen=True)
class CachePress(Press):
    """Compresses each decoder layer's KV cache after its prefill, among audio entries only.

    Text and special tokens are never evicted. Each layer from ``layer`` on keeps, per row,
    ``max(1, round(n * (1 - ratio)))`` of the ``n`` audio entries it holds (after any token dropping),
    the highest-scoring ones, with one choice shared by all heads. The prefill itself is unchanged
    (it already ran); later tokens attend to the compressed cache.
    """

    ratio: float = 0.0
    layer: int = 1

    kind: ClassVar[str] = "cache"

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", validate_ratio(self.ratio))

    def score(self, layer_idx: int, keys: torch.Tensor, values: torch.Tensor, is_audio: torch.Tensor) -> torch.Tensor:
        """Importance of each cached entry, (B, L); higher is kept. ``keys``: (B, kv_heads, L, head_dim)."""
        raise NotImplementedError


@dataclass(frozen=True)
class ComposedPress(Press):
    """Several presses at once: at most one token-dropping press plus any number of cache presses.

    ``ComposedPress([DARTPress(ratio=0.5), KNormPress(ratio=0.3)])`` drops half the audio tokens at
    layer K, then evicts 30% of the remaining audio entries from every layer's cache.
    """

    presses: tuple[Press, ...] = ()

    kind: ClassVar[str] = "composed"

    def __post_init__(self) -> None:
        object.__setattr__(self, "presses", tuple(self.presses))
        if not self.presses:
            raise ValueError("a ComposedPress needs at least one press.")
        if sum(part.kind == "token" for part in self.parts()) > 1:
            raise ValueError("at most one token-dropping press can be active at a time; compose it with cache presses.")

    @property
    def layer(self) -> int:
        """The first layer any part acts on."""
        return min(part.layer for part in self.parts())

    def __call__(self, model: nn.Module, ratio: float | None = None) -> PressSession:
        if ratio is not None:
            raise ValueError("a ComposedPress has no single ratio: set the ratio of each of its presses.")
        return super().__call__(model)

    def parts(self) -> tuple[Press, ...]:
        return tuple(part for press in self.presses for part in press.parts())


PRESS_KINDS = {"token": TokenDropPress, "cache": CachePress}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _check_press(name: str, cls) -> None:
    """Only single-press classes can be registered, under names a method spec can spell."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"press name {name!r} is invalid: start with a letter, then letters, digits, '_' or '-'.")
    if not (isinstance(cls, type) and issubclass(cls, tuple(PRESS_KINDS.values()))):
        raise TypeError(f"press {name!r} must be a subclass of TokenDropPress or CachePress, not {cls!r}.")


#: press classes by name; third-party packages add theirs through the entry-point group ``kvprune.presses``
PRESSES: Registry[type[Press]] = Registry("press", entry_point_group="kvprune.presses", check=_check_press)


def register_press(name: str, cls: type[Press] | None = None):
    """Make a press class available by name to ``get_press``, method specs, ``kvprune presses`` and
    the sweep: ``@register_press("name")`` above ``@dataclass(frozen=True)``, or ``register_press("name", cls)``."""
    return PRESSES.register(name, cls)


def list_presses(kind: str | None = None) -> list[str]:
    """Registered press names; ``kind="token"`` or ``"cache"`` keeps one kind."""
    if kind is None:
        return PRESSES.names()
    if kind not in PRESS_KINDS:
        raise ValueError(f"kind={kind!r} is invalid; choose one of {', '.join(PRESS_KINDS)}.")
    return [name for name, cls in PRESSES.items() if cls.kind == kind]


def get_press(name: str, **kwargs) -> Press:
    """Build a press by name, e.g. ``get_press("fastv", ratio=0.5, layer=3)``."""
    return PRESSES.get(name)(**kwargs)
