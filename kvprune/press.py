"""The Press API: ``with press(model, ratio=0.5) as outcome: model.generate(**inputs)``.

A press is configuration: a small frozen dataclass that calling never changes. Token-dropping
presses only decide *which* audio tokens of a clip to keep (``select``); cache presses only *score*
a layer's cached entries (``score``). The engine (``kvprune.engine``) does everything else,
identically for all of them, runs several presses at once when they are composed
(``ComposedPress``), and hands what was pruned to the ``with`` block as a ``PressOutcome``.

Writing a press (see the README): subclass ``TokenDropPress`` or ``CachePress`` as a frozen
dataclass and register it by name, in this order::

    @register_press("first")
    @dataclass(frozen=True)
    class FirstPress(TokenDropPress):
        def select(self, clip, evidence):
            return clip.positions(evidence.device)[: clip.n_keep]  # the first tokens of each clip

A package can register presses without being imported by hand, through the entry-point group
``kvprune.presses`` (``[project.entry-points."kvprune.presses"] first = "mypkg:FirstPress"``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import ClassVar

import torch

#: K of a token press that names none: the layer before which it drops tokens (FastV's)
TOKEN_LAYER = 2
import torch.nn as nn

from .engine.cache_budgets import top_per_group
from .engine.cache_scoring import CacheEvidence
from .engine.clips import Clip, scope_modalities
from .engine.compression import SCOPES
from .engine import PressSession
from .keep_rules import keep_count, validate_keep_rule
from .ratios import Ratio, validate_ratio
from .registry import Registry


@dataclass(frozen=True)
class Press:
    """Base of all presses: calling one on a model returns a context manager that yields a ``PressOutcome``.

    Every press has ``layer``, the first decoder layer it acts on, and ``kind``: "token", "cache"
    or "composed". The engine reads ``kind``, ``layer``, ``needs`` and ``prunes`` and calls ``parts()``,
    ``keep()``, ``select()`` and ``score()``; nothing else: what a ratio means is the press's own.
    """

    kind: ClassVar[str]
    #: what the engine records for the press: a token-dropping press's ``select`` reads "attention",
    #: "keys" or "hidden" of layer K-1; a cache press's ``score`` reads "queries" of every layer it compresses
    needs: ClassVar[frozenset[str]] = frozenset()

    def __call__(self, model: nn.Module, ratio: float | None = None) -> PressSession:
        """This press on ``model`` for one ``with`` block; ``ratio``, when given, is used instead of
        ``self.ratio`` (``with_ratio``)."""
        return PressSession(model, self.with_ratio(ratio))

    def _check_ratio(self) -> None:
        """``ratio`` as a checked ``Ratio``: a plain number is checked here (``validate_ratio``); a ``Ratio``
        (parsed by the harness, or a press's own) was checked when it was made."""
        if not isinstance(self.ratio, Ratio):
            object.__setattr__(self, "ratio", validate_ratio(self.ratio))

    def with_ratio(self, ratio: float | None) -> Press:
        """This press at ``ratio`` (a copy: the press itself never changes); itself when ``ratio`` is None."""
        return self if ratio is None else dataclasses.replace(self, ratio=ratio)

    def parts(self) -> tuple[Press, ...]:
        """The single presses the engine runs: this one, or the members of a composition."""
        return (self,)

    @property
    def prunes(self) -> bool:
        """Whether the press removes anything at all (a part's ratio above 0); else the engine leaves the
        model exactly as without it."""
        return any(part.ratio > 0 for part in self.parts())


@dataclass(frozen=True)
class TokenDropPress(Press):
    """Drops audio tokens from the hidden states before decoder layer ``layer`` (K).

    ``ratio`` is the fraction of each clip's audio tokens removed, in [0, 1); each clip keeps
    ``max(1, round(n * (1 - ratio)))``, or ``max(1, int(n * (1 - ratio)))`` with
    ``keep_rule="floor"`` (AudioMarathon's count; ``kvprune.keep_rules``). Layers 0..K-1 see the full
    prompt; layers K.. and their KV cache hold only the kept tokens, at their original positions.
    ``scope`` says which placeholders are clips to prune: ``"audio"`` (default), ``"video"`` (video
    frames' and images' tokens, on the Omni families) or ``"audio+video"`` (``kvprune.engine.clips``).
    """

    ratio: float = 0.0
    layer: int = TOKEN_LAYER
    keep_rule: str = "round"
    scope: str = "audio"

    kind: ClassVar[str] = "token"

    def __post_init__(self) -> None:
        self._check_ratio()
        validate_keep_rule(self.keep_rule)
        scope_modalities(self.scope)

    def keep(self, n: int) -> int:
        """Tokens a clip of ``n`` in the press's scope keeps: ``keep_count(n, ratio, keep_rule)``
        (``clip.n_keep``, what ``select`` returns)."""
        return keep_count(n, self.ratio, self.keep_rule)

    def select(self, clip: Clip, evidence) -> torch.Tensor:
        """Indices (into the prompt tensor) of the ``clip.n_keep`` tokens of ``clip`` to keep, on the
        evidence's device (``evidence.device``), distinct and among ``clip.positions()`` (a clip may be
        several runs: a sound track between video chunks). Avoid reading values back to the host: it
        would stall the GPU in the middle of the prefill (see ``Evidence``)."""
        raise NotImplementedError


@dataclass(frozen=True)
class CachePress(Press):
    """Compresses each decoder layer's KV cache after its prefill: the prefill itself is unchanged
    (it already ran); decoding and later turns attend to the compressed cache.

    A cache press only *scores* the entries of one layer's cache (``score``); the engine does the
    rest. Parameters every cache press has:

    * ``ratio``: the fraction of the candidate entries evicted, in [0, 1).
    * ``layer``: the first layer compressed (every later one is too); layer 0 stays full.
    * ``scope``: which entries are candidates. ``"audio"`` (default): the audio entries only, each clip
      keeping ``max(1, round(n * (1 - ratio)))`` of its ``n`` (after any token dropping); text and
      audio markers are never evicted. ``"video"`` and ``"audio+video"``: the same for the visual
      entries (video frames, images), or both, each clip its own budget. ``"prompt"``: every prompt entry except the chat template's
      header (all before the first clip) and the last ``window`` entries, as one budget per row
      (kvpress's whole-prompt compression, the setting of AudioMarathon's KV-cache numbers).
    * ``window``: the last prompt entries: never evicted under ``scope="prompt"``, and the
      observation window of presses that score with the last queries (SnapKV).
    * ``keep_rule``: ``"round"`` (above) or ``"floor"``, ``max(1, int(n * (1 - ratio)))`` as kvpress
      and AudioMarathon count (``kvprune.keep_rules``).

    Writing one: implement ``score(evidence)``; declare ``needs = frozenset({"queries"})`` to be
    given the post-RoPE queries of the last ``query_rows`` prompt positions (default ``window``).
    ``keep`` (budgets) and ``choose`` (which entries) have defaults that presses rarely change.
    """

    ratio: float = 0.0
    layer: int = 1
    scope: str = "audio"
    window: int = 64
    keep_rule: str = "round"

    kind: ClassVar[str] = "cache"
    #: whether ``choose`` keeps entries per KV head (the engine then masks per head)
    headwise: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self._check_ratio()
        if self.scope not in SCOPES:
            raise ValueError(f"scope={self.scope!r} is invalid; choose one of {SCOPES}.")
        if self.window < 1:
            raise ValueError(f"window={self.window} is invalid: at least the last prompt entry is kept (window >= 1).")
        validate_keep_rule(self.keep_rule)

    @property
    def query_rows(self) -> int:
        """How many of the last prompt positions' queries ``score`` reads, when ``needs`` has
        "queries" (``ALL_QUERIES``: every one)."""
        return self.window

    def score(self, evidence: CacheEvidence) -> torch.Tensor:
        """Importance of each cached entry, higher is kept: (B, L), or (B, kv_heads, L) per KV head.
        See ``kvprune.engine.cache_scoring.CacheEvidence`` for what ``evidence`` holds. Avoid reading values
        back to the host: it would stall the GPU in the middle of the prefill."""
        raise NotImplementedError

    def keep(self, n: int, layer_idx: int, n_layers: int) -> int:
        """Entries a budget group of ``n`` candidates keeps at layer ``layer_idx`` of the ``n_layers``
        that hold a cache of their own (Gemma-3n's last layers reuse earlier ones' and do not count):
        ``keep_count(n, ratio, keep_rule)`` at every layer (uniform budgets)."""
        return keep_count(n, self.ratio, self.keep_rule)

    def choose(self, scores: torch.Tensor, evidence: CacheEvidence, budgets: torch.Tensor) -> torch.Tensor:
        """Keep mask of the entries: (B, L), the same for every head: in each budget group g of row b,
        the ``budgets[b, g]`` best entries by score averaged over heads (ties: the earlier entry)."""
        return top_per_group(scores.mean(dim=1) if scores.dim() == 3 else scores, evidence.groups, budgets)


@dataclass(frozen=True)
class DelegatingCachePress(CachePress):
    """A cache press that wraps another, configured cache press (``press``, default SnapKV at its
    defaults) and takes its scores from it: ``PyramidKVPress(press=SnapKVPress(window=32, kernel=7))``.
    Subclasses change how budgets are set (pyramidkv) or how entries are chosen (adakv), so that
    either combines with any press that scores.

    Who sets what, as kvpress sets a wrapper's compression ratio onto the press it wraps:

    * ``ratio``, ``layer`` and ``keep_rule`` are the wrapper's (a sweep sets them on every method, and
      ``press(model, ratio=...)`` replaces them) and apply to the inner press; the inner press leaves
      them at their defaults.
    * ``scope`` and ``window`` say which entries are candidates and how many of the last queries the
      inner press reads: set on either, they apply to both (set on both, they must agree; to change
      them on a built wrapper, change them on its ``press`` too).
    * Everything else of the inner press (SnapKV's ``kernel`` and ``pool``, a seed) is its own.
    """

    press: CachePress = field(default_factory=lambda: get_press("snapkv"))

    #: parameters of earlier releases -> their name now, for the error a method spec naming them gets
    renamed: ClassVar[dict[str, str]] = {"scorer": "press"}

    def __post_init__(self) -> None:
        super().__post_init__()
        inner = self.press
        _check_wrapped(type(self).__name__, inner)
        inner_defaults = _defaults(type(inner))
        given = [name for name in ("ratio", "layer", "keep_rule") if getattr(inner, name) != inner_defaults[name]]
        if given:
            name = given[0]
            raise ValueError(
                f"{type(self).__name__} sets {name} for the press it wraps: give {name}={getattr(inner, name)!r} to "
                f"{type(self).__name__}, not to its {type(inner).__name__}."
            )
        own_defaults = _defaults(type(self))
        shared = {}
        for name in ("scope", "window"):
            own, theirs = getattr(self, name), getattr(inner, name)
            if own != own_defaults[name] and theirs != inner_defaults[name] and own != theirs:
                raise ValueError(
                    f"{type(self).__name__}({name}={own!r}) and its {type(inner).__name__}({name}={theirs!r}) disagree: "
                    f"{name} applies to both, so set it once."
                )
            shared[name] = own if own != own_defaults[name] else theirs
        object.__setattr__(self, "scope", shared["scope"])
        object.__setattr__(self, "window", shared["window"])
        object.__setattr__(self, "press", dataclasses.replace(inner, **shared))

    @functools.cached_property
    def scoring_press(self) -> CachePress:
        """The inner press at this press's ratio, layer and keep rule: whose scores (and, unless
        overridden, budgets and choices) this one uses."""
        return dataclasses.replace(self.press, ratio=self.ratio, layer=self.layer, keep_rule=self.keep_rule)

    @property
    def needs(self) -> frozenset[str]:
        return self.scoring_press.needs

    @property
    def headwise(self) -> bool:
        return self.scoring_press.headwise

    @property
    def query_rows(self) -> int:
        return self.scoring_press.query_rows

    def score(self, evidence: CacheEvidence) -> torch.Tensor:
        return self.scoring_press.score(evidence)

    def keep(self, n: int, layer_idx: int, n_layers: int) -> int:
        return self.scoring_press.keep(n, layer_idx, n_layers)

    def choose(self, scores: torch.Tensor, evidence: CacheEvidence, budgets: torch.Tensor) -> torch.Tensor:
        return self.scoring_press.choose(scores, evidence, budgets)


def _check_wrapped(wrapper: str, inner) -> None:
    """A wrapper takes a configured press that scores: not a name, a class, a token press or another wrapper."""
    scorers = ", ".join(list_scorers())
    if isinstance(inner, str):
        raise TypeError(
            f"{wrapper}(press={inner!r}) names a press: give the press itself, {wrapper}(press=get_press({inner!r})) "
            f"(in a method spec, press={inner})."
        )
    if not isinstance(inner, CachePress):
        what = f"the class {inner.__name__}" if isinstance(inner, type) else type(inner).__name__
        raise TypeError(f"{wrapper}(press=...) takes a configured cache press that scores ({scorers}), not {what}.")
    if isinstance(inner, DelegatingCachePress):
        raise ValueError(
            f"{wrapper}(press={type(inner).__name__}(...)) wraps a budget policy, which takes another press's scores; "
            f"choose a press that scores: {scorers}."
        )


def _defaults(press_class) -> dict:
    """The press class's parameters at their defaults."""
    return {f.name: f.default for f in dataclasses.fields(press_class) if f.default is not dataclasses.MISSING}


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

    def with_ratio(self, ratio: float | None) -> Press:
        if ratio is not None:
            raise ValueError("a ComposedPress has no single ratio: set the ratio of each of its presses.")
        return self

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
PRESSES: Registry[type[Press]] = Registry("press", entry_point_group="kvprune.presses", check=_check_press,
                                          builtin="kvprune.presses")


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


def list_scorers() -> list[str]:
    """The cache presses that score entries themselves: what a budget policy may wrap (a budget
    policy such as pyramidkv takes another press's scores, so it cannot be one)."""
    return [name for name in list_presses(kind="cache") if not issubclass(PRESSES.get(name), DelegatingCachePress)]


def get_press(name: str, **kwargs) -> Press:
    """Build a press by name, e.g. ``get_press("fastv", ratio=0.5, layer=3)``."""
    return PRESSES.get(name)(**kwargs)
