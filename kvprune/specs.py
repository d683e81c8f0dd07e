"""Method specs: what a sweep or a bench runs, as presses with parameters, composed or not.

Text (``--methods``): methods separated by commas; a method is parts joined by ``+``; a part is
``name[:key=value,key=value]``. A comma-separated chunk that looks like ``key=value`` continues the
previous part's parameters::

    fastv,dart:budget=reference,pivot_audio=2,frame+knorm:ratio=0.3

YAML and dicts: ``"fastv"`` (any text above), ``{press: dart, budget: reference}``,
``{compose: [frame, {press: knorm, ratio: 0.3}]}``.

A parameter that is itself a press (the press a budget policy wraps) is written as a call, its own
parameters in parentheses: ``pyramidkv:press=snapkv(window=32,kernel=7)``, ``adakv:press=knorm``.

Values are converted by the press field's type (int, float, bool, str). ``build(ratio, layer,
keep_rule)`` makes the press: parts without their own ``ratio`` take the sweep's, parts without their
own ``layer`` (``keep_rule``) take ``layer`` (``keep_rule``) when one is given, else their own default. The canonical ``label`` is what
results, summaries and plots show: the parts in order, each with the parameters given explicitly
that differ from the default (``ratio``, ``layer`` and ``keep_rule`` whenever given: they pin what a
sweep sets),
so ``dart:budget=equal`` is ``dart``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from .press import PRESSES, CachePress, ComposedPress, Press

#: fields that a sweep sets on every part that does not set them itself
SWEPT = ("ratio", "layer", "keep_rule")
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_CONVERTERS = {int: int, float: float, str: str, bool: lambda text: _BOOLS[text.lower()]}  # from text
_PRESS_TYPES = (Press, CachePress)  # fields whose value is a press, written as a call: snapkv(window=32)
_BY_NAME = {kind.__name__: kind for kind in (*_CONVERTERS, *_PRESS_TYPES)}  # field types written as text (postponed annotations)
_SYNTAX = ",+:=()"  # characters a text value cannot hold: the label could not be read back
_CALL = re.compile(r"\s*([A-Za-z][A-Za-z0-9_-]*)\s*(?:\((.*)\))?\s*", re.DOTALL)


class MethodSpecError(ValueError):
    """A method spec names an unknown press or parameter, or is written wrongly."""


@dataclass(frozen=True)
class PartSpec:
    """One press of a method: its registered name and, in field order, the parameters it sets:
    ``ratio``, ``layer`` and ``keep_rule`` when given, the others when they differ from the press's defaults."""

    press: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, press: str, params: dict[str, Any]) -> PartSpec:
        """Check the name and parameters against the press class and convert the values."""
        try:
            press_class = PRESSES.get(press)
        except ValueError as error:
            raise MethodSpecError(str(error)) from None
        types = _field_types(press_class)
        unknown = [key for key in params if key not in types]
        if unknown:
            key = unknown[0]
            renamed = getattr(press_class, "renamed", {}).get(key)
            now = f" (it is now {renamed!r}: {press}:{renamed}={params[key]})" if renamed else ""
            raise MethodSpecError(f"press {press!r} has no parameter {key!r}{now}; its parameters: {', '.join(types)}.")
        converted = {key: _convert(press, key, types[key], params[key]) for key in params}
        defaults = {f.name: _default(f) for f in dataclasses.fields(press_class)}
        return cls(press, tuple(
            (key, converted[key]) for key in types
            if key in converted and (key in SWEPT or _built(converted[key]) != defaults[key])
        ))

    @property
    def label(self) -> str:
        return self.press + (":" + ",".join(f"{key}={_text(value)}" for key, value in self.params) if self.params else "")

    @property
    def call(self) -> str:
        """The part as the value of a press parameter: ``snapkv(window=32,kernel=7)``."""
        return self.press + (f"({self.label.partition(':')[2]})" if self.params else "")

    def build(self, ratio: float | None = None, layer: int | None = None, keep_rule: str | None = None) -> Press:
        """The press with its parameters, and ``ratio``, ``layer``, ``keep_rule`` where it sets none (None:
        its default); a parameter that is a press is built with its own parameters only."""
        values = {key: _built(value) for key, value in self.params}
        for key, value in (("ratio", ratio), ("layer", layer), ("keep_rule", keep_rule)):
            if value is not None:
                values.setdefault(key, value)
        return PRESSES.get(self.press)(**values)


@dataclass(frozen=True)
class MethodSpec:
    """A method: one press, or several composed (at most one token-dropping press among them)."""

    parts: tuple[PartSpec, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise MethodSpecError("a method needs at least one press.")
        own = {dict(part.params)["ratio"] for part in self.parts if "ratio" in dict(part.params)}
        if len(own) > 1 and not self.takes_ratio:
            raise MethodSpecError(
                f"method {self.label!r} sets ratios {', '.join(map(str, sorted(own)))} in its presses, so its results "
                "would have no one ratio: leave one press's ratio to --ratios, or give them one ratio."
            )
        try:
            self.build(0.0)  # the presses check their own values (and ComposedPress its parts)
        except (TypeError, ValueError) as error:
            raise MethodSpecError(f"method {self.label!r}: {error}") from None

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        return "+".join(part.label for part in self.parts)

    @property
    def kind(self) -> str:
        """"token" or "cache" for a single press, "composed" for several."""
        return PRESSES.get(self.parts[0].press).kind if len(self.parts) == 1 else "composed"

    @property
    def takes_ratio(self) -> bool:
        """Whether some part takes the ratio given to ``build`` (has none of its own)."""
        return any("ratio" not in dict(part.params) for part in self.parts)

    @property
    def own_ratios(self) -> tuple[float, ...]:
        """The one ratio this method's parts set themselves, when every part sets it: the method runs
        once, at it, whatever ratios a sweep or a bench gives (``method.own_ratios or ratios``), so that
        ``knorm:ratio=0.5`` beside ``--ratios 0.9`` runs and is labelled at 0.5, never at 0.9. Empty
        where a part takes the given ratio."""
        return () if self.takes_ratio else (dict(self.parts[0].params)["ratio"],)

    def build(self, ratio: float, layer: int | None = None, keep_rule: str | None = None) -> Press:
        """The press at ``ratio``; ``layer`` and ``keep_rule`` for every part without its own (None:
        each press's default)."""
        presses = [part.build(ratio, layer, keep_rule) for part in self.parts]
        return presses[0] if len(presses) == 1 else ComposedPress(presses)


def parse_method(value) -> MethodSpec:
    """Exactly one method, from text (``"frame+knorm:ratio=0.3"``), a dict or a ``MethodSpec``."""
    methods = parse_methods(value)
    if len(methods) != 1:
        raise MethodSpecError(f"{value!r} holds {len(methods)} methods where one is expected.")
    return methods[0]


def parse_methods(value) -> list[MethodSpec]:
    """Methods from text (comma-separated), a dict, or a list of those (YAML's ``methods:``)."""
    if isinstance(value, MethodSpec):
        return [value]
    if isinstance(value, str):
        return [MethodSpec(tuple(parts)) for parts in _parse_text(value)]
    if isinstance(value, dict):
        return [MethodSpec(tuple(_parts_of_dict(value)))]
    if isinstance(value, (list, tuple)):
        return [method for item in value for method in parse_methods(item)]
    raise MethodSpecError(f"cannot read a method from {value!r}: {_FORMS}")


_FORMS = (
    "write 'name', 'name:key=value,key=value' or 'a+b' (composed), or in YAML {press: name, key: value} "
    "or {compose: [a, {press: b, key: value}]}."
)


def _parse_text(text: str) -> list[list[PartSpec]]:
    methods: list[list[tuple[str, dict]]] = []
    for chunk in _split(text, ",", text):
        pieces = [piece.strip() for piece in _split(chunk, "+", text)]
        if pieces == [""]:
            continue
        if "=" in pieces[0] and ":" not in pieces[0]:  # key=value: more parameters of the previous part
            if not methods:
                raise MethodSpecError(f"{text!r}: parameter {pieces[0]!r} comes before any press; {_FORMS}")
            _add_parameter(methods[-1][-1], pieces[0], text)
            methods[-1] += [_split_part(piece, text) for piece in pieces[1:]]
        else:
            methods.append([_split_part(piece, text) for piece in pieces])
    return [_parts(parts) for parts in methods]


def _parts(parts: list[tuple[str, dict]]) -> list[PartSpec]:
    """The checked parts of one method, each a press name and its parameters; an error names the
    method as written, as the method's own checks do."""
    try:
        return [PartSpec.of(name, params) for name, params in parts]
    except MethodSpecError as error:
        written = "+".join(name + (":" + ",".join(f"{key}={value}" for key, value in params.items()) if params else "")
                           for name, params in parts)
        raise MethodSpecError(f"method {written!r}: {error}") from None


def _split_part(piece: str, text: str) -> tuple[str, dict]:
    name, _, parameters = piece.partition(":")
    if not name.strip():
        raise MethodSpecError(f"{text!r}: a press name is missing; {_FORMS}")
    part = (name.strip(), {})
    for parameter in filter(None, (p.strip() for p in _split(parameters, ",", text))):
        _add_parameter(part, parameter, text)
    return part


def _split(text: str, separator: str, whole: str) -> list[str]:
    """``text`` split at ``separator`` outside parentheses (a press parameter's own parameters)."""
    pieces, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
        if char == separator and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise MethodSpecError(f"{whole!r}: its parentheses do not pair up; {_FORMS}")
    return [*pieces, text[start:]]


def _add_parameter(part: tuple[str, dict], parameter: str, text: str) -> None:
    key, equals, value = (s.strip() for s in parameter.partition("="))
    if not equals or not key:
        raise MethodSpecError(f"{text!r}: {parameter!r} is not key=value; {_FORMS}")
    if key in part[1]:
        raise MethodSpecError(f"{text!r}: {part[0]} sets {key} twice.")
    part[1][key] = value


def _parts_of_dict(value: dict) -> list[PartSpec]:
    if "compose" in value:
        if len(value) != 1 or not isinstance(value["compose"], list):
            raise MethodSpecError(f"{value!r}: compose takes a list of presses and nothing beside it; {_FORMS}")
        return [part for item in value["compose"] for part in parse_method(item).parts]
    if "press" not in value:
        raise MethodSpecError(f"{value!r} names no press; {_FORMS}")
    params = {key: item for key, item in value.items() if key != "press"}
    return _parts([(str(value["press"]), params)])


def _field_types(press_class) -> dict[str, Any]:
    """The constructor's fields and their types, in field order."""
    return {f.name: _BY_NAME.get(f.type, f.type) if isinstance(f.type, str) else f.type
            for f in dataclasses.fields(press_class) if f.init}


def _convert(press: str, key: str, kind: Any, value: Any) -> Any:
    if kind in _PRESS_TYPES:
        return _press_value(press, key, value)
    if kind not in _CONVERTERS:
        raise MethodSpecError(f"{press}.{key} (of type {kind}) cannot be set from a method spec.")
    if isinstance(value, str):
        if kind is str and any(c in value for c in _SYNTAX):
            raise MethodSpecError(f"{press}.{key}={value!r}: a value cannot contain any of {_SYNTAX!r}.")
        try:
            return _CONVERTERS[kind](value)
        except (KeyError, ValueError):
            raise MethodSpecError(f"{press}.{key}={value!r} is not a valid {kind.__name__}.") from None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not kind:
        raise MethodSpecError(f"{press}.{key}={value!r} is not a valid {kind.__name__}.")
    return value


def _press_value(press: str, key: str, value: Any) -> PartSpec:
    """A press parameter's value, ``name`` or ``name(key=value,...)``, as a part of its own."""
    match = _CALL.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise MethodSpecError(f"{press}.{key}={value!r} is not a press: write a press name, or name(key=value,...).")
    text = match.group(0)
    name, parameters = match.group(1), match.group(2) or ""
    part = (name, {})
    for parameter in filter(None, (p.strip() for p in _split(parameters, ",", text))):
        _add_parameter(part, parameter, text)
    spec = PartSpec.of(*part)
    try:
        spec.build()  # the press checks its own values
    except (TypeError, ValueError) as error:
        raise MethodSpecError(f"{press}.{key}={spec.call}: {error}") from None
    return spec


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _built(value: Any) -> Any:
    """A parameter's value for the press: a press parameter built from its part."""
    return value.build() if isinstance(value, PartSpec) else value


def _text(value: Any) -> str:
    if isinstance(value, PartSpec):
        return value.call
    return str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, float) else str(value)
