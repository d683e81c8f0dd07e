"""One shape for the configurations of ``kvprune sweep`` and ``kvprune bench``.

A command's configuration is a dataclass whose defaults are the command line's. ``build`` makes one
from the defaults, then a YAML file, then every command-line override given (not None); ``overrides``
reads the command's parsed arguments into those overrides. Constructing a configuration normalises
what was written as text (``"0.1..0.9"``, ``"fastv,frame"``) and validates the whole, so a
configuration that exists is one that can run, and a mistake stops the command before anything is
loaded.
"""

from __future__ import annotations

import argparse
import types
import typing
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import yaml

from .options import CACHES, ENCODERS

if TYPE_CHECKING:
    from kvprune.specs import MethodSpec


@dataclass
class CommandConfig:
    """The base of ``SweepConfig`` and ``BenchConfig``: subclasses declare their settings as fields and
    implement ``normalise``, ``validate`` and ``overrides``."""

    #: what the command's YAML file is called in errors, and the error its mistakes raise
    file_kind: ClassVar[str] = "config"
    error: ClassVar[type[ValueError]] = ValueError
    #: YAML keys read as another setting, one value as a list of one (``model: x`` is ``models: [x]``)
    aliases: ClassVar[dict[str, str]] = {}
    #: YAML keys spelled as their flag, read as the setting the flag sets (``decoding: static`` is ``cache``)
    spellings: ClassVar[dict[str, str]] = {"decoding": "cache"}

    def __post_init__(self) -> None:
        self.normalise()
        self.validate()

    def normalise(self) -> None:
        """Bring values written as text (on the command line, in a YAML file) to their types."""

    def validate(self) -> None:
        """Raise ``error`` naming the first setting that cannot run, and how to fix it."""

    def check_shared(self) -> None:
        """The settings every command has: the audio encoder path, the decoding cache, the prefill's compiled layers,
        the device."""
        if self.encoder not in ENCODERS:
            raise self.error(f"encoder={self.encoder!r} is invalid: choose {' or '.join(ENCODERS)} (--stock-encoder).")
        if self.cache not in CACHES:
            raise self.error(f"cache={self.cache!r} is invalid: choose one of {', '.join(CACHES)} (--decoding).")
        if not (isinstance(self.compile_prefill, bool) or self.compile_prefill == "auto"):
            raise self.error(f"compile_prefill={self.compile_prefill!r} is invalid: true, false or auto, the engine's "
                             "default (--compile-prefill / --no-compile-prefill).")
        from .device import check_device  # imports torch: after every other check

        check_device(self.device)

    @classmethod
    def build(cls, yaml_path: str | Path | None = None, **overrides):
        """Defaults, then the YAML file, then every override that is not None."""
        return cls(**cls.settings(yaml_path, **overrides))

    @classmethod
    def settings(cls, yaml_path: str | Path | None = None, **overrides) -> dict:
        """What ``build`` constructs from: the YAML file's settings and every override that is not None
        (the defaults fill the rest)."""
        values = cls.read_file(yaml_path) if yaml_path else {}
        values.update({name: value for name, value in overrides.items() if value is not None})
        return values

    @classmethod
    def read_file(cls, path: str | Path) -> dict:
        """The settings of a YAML file, checked by name."""
        path = Path(path)
        if not path.is_file():
            raise cls.error(f"{cls.file_kind} {path} not found.")
        try:
            values = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as error:
            raise cls.error(f"{cls.file_kind} {path} is not valid YAML: {error}") from None
        if not isinstance(values, dict):
            raise cls.error(f"{cls.file_kind} {path} must be a mapping of settings.")
        written = set(values)
        for spelled, name in cls.spellings.items():
            if spelled in values and name in values:
                raise cls.error(f"{cls.file_kind} {path}: {spelled} and {name} are one setting; give it once.")
            if spelled in values:
                values[name] = values.pop(spelled)
        for alias, name in cls.aliases.items():
            if alias in values:
                value = values.pop(alias)
                values[name] = [value] if isinstance(value, str) else value
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(set(values) - known)
        if unknown:
            spelled = sorted(known | set(cls.aliases) | set(cls.spellings))
            raise cls.error(f"{cls.file_kind} {path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(spelled)}.")
        hints = typing.get_type_hints(cls, localns=_UNIMPORTED)
        for name, value in values.items():
            expected = _kinds(hints[name])
            if expected and not any(_is(value, kind) for kind in expected):
                spelled = next((alias for alias, target in {**cls.aliases, **cls.spellings}.items()
                                if target == name and alias in written), name)
                raise cls.error(f"{cls.file_kind} {path}: {spelled}: expected {' or '.join(_WORDS[k] for k in expected)}, "
                                f"got {value!r}; fix the value or leave the setting out for its default.")
        return values

    @classmethod
    def overrides(cls, args: argparse.Namespace) -> dict:
        """The settings given on the command line, for ``build`` (None: not given)."""
        raise NotImplementedError

    @classmethod
    def default(cls, name: str):
        """A setting's default, without building a configuration."""
        spec = next(f for f in fields(cls) if f.name == name)
        return spec.default_factory() if spec.default is MISSING else spec.default


class _SpecText:
    """What a YAML file writes a method spec as (text or a mapping), standing for ``MethodSpec`` when
    the settings' types are read: ``kvprune.specs`` imports torch."""


#: names in the settings' annotations that are not imported where they are declared
_UNIMPORTED = {"MethodSpec": _SpecText, "Press": object}
#: how a YAML value of each kind of setting is described in errors
_WORDS = {int: "a whole number", float: "a number", bool: "true or false", str: "text", list: "a list",
          dict: "a mapping", type(None): "nothing (null)"}


def _kinds(annotation) -> tuple[type, ...]:
    """The YAML types a setting of this annotation takes (a path as text, a list also as
    comma-separated text, a float also as a whole number, a method spec as text or a mapping); ()
    when the annotation names something else (any value, checked where it is read)."""
    kinds: list[type] = []
    for part in typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,):
        origin = typing.get_origin(part) or part
        if origin is list:
            kinds += [list, str, float] if typing.get_args(part) == (float,) else [list, str]
        elif origin is Path:
            kinds.append(str)
        elif origin is _SpecText:
            kinds += [str, dict]
        elif origin in _WORDS:
            kinds.append(origin)
        else:
            return ()
    return tuple(dict.fromkeys(kinds))


def _is(value, kind: type) -> bool:
    """Whether a YAML value is of ``kind`` (a boolean is no number; a whole number is a float)."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def unique_methods(specs) -> list[MethodSpec]:
    """Method specs (a comma-separated string, a list) parsed, each label once."""
    from kvprune.specs import parse_methods  # imports torch (the presses)

    return list({method.label: method for method in parse_methods(specs)}.values())
