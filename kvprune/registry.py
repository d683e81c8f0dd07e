"""The one registry mechanism: named things (press classes, model families, functions, ...) that
users can extend.

    PRESSES = Registry("press", entry_point_group="kvprune.presses")

    @PRESSES.register("fastv")          # as a decorator
    class FastVPress: ...

    PRESSES.register("mine", MinePress)  # or as a call
    PRESSES.get("fastv")                 # unknown names raise an error that lists the known ones

Third-party packages can add entries without being imported by hand: every entry point of the
registry's group (``[project.entry-points."kvprune.presses"] mine = "mypkg.presses:MinePress"``) is
loaded the first time the registry is read, and registered under the entry point's name.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries in registration order (built-in entries first, then entry points)."""

    def __init__(self, kind: str, entry_point_group: str | None = None, check: Callable[[str, T], None] | None = None,
                 builtin: str | None = None):
        """``kind`` names an entry in messages ("press"); ``check(name, entry)`` may refuse an entry
        by raising (e.g. a class that is not a press); ``builtin`` is the module whose import
        registers the built-in entries, imported the first time the registry is read."""
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.builtin = builtin
        self._check = check
        self._entries: dict[str, T] = {}
        self._entry_points_loaded = entry_point_group is None

    def register(self, name: str, entry: T | None = None):
        """``register(name, entry)`` adds ``entry`` and returns it; ``register(name)`` is a decorator.

        A name can be taken once. Registering it again is allowed only for the same entry, or for
        an entry of the same module and qualified name (a module reloaded, a notebook cell rerun).
        """
        if entry is None:
            return lambda decorated: self.register(name, decorated)
        self._load_builtin()  # the built-in entries come first
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{self.kind} name {name!r} is invalid: give a non-empty string.")
        if self._check is not None:
            self._check(name, entry)
        current = self._entries.get(name)
        if current is not None and not _same(current, entry):
            raise ValueError(
                f"{self.kind} {name!r} is already registered ({_qualified_name(current)}); "
                f"register {_qualified_name(entry)} under another name."
            )
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> T:
        """Remove an entry and return it (the same error as ``get`` for an unknown name)."""
        entry = self.get(name)
        del self._entries[name]
        return entry

    def get(self, name: str) -> T:
        entries = self._loaded()
        if name not in entries:
            raise ValueError(f"unknown {self.kind} {name!r}; available: {', '.join(entries) or 'none'}")
        return entries[name]

    def names(self) -> list[str]:
        return list(self._loaded())

    def items(self) -> list[tuple[str, T]]:
        return list(self._loaded().items())

    def values(self) -> list[T]:
        return list(self._loaded().values())

    def __contains__(self, name: object) -> bool:
        return name in self._loaded()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._loaded())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"

    def _load_builtin(self) -> None:
        if self.builtin is not None:
            builtin, self.builtin = self.builtin, None  # first: the module's own registrations must not recurse
            importlib.import_module(builtin)

    def _loaded(self) -> dict[str, T]:
        """The entries, once the built-in ones and the entry points of the group (if any) have been loaded."""
        self._load_builtin()
        if not self._entry_points_loaded:
            self._entry_points_loaded = True  # first, so that a plugin that reads the registry does not recurse
            for point in entry_points(group=self.entry_point_group):
                try:
                    self.register(point.name, point.load())
                except Exception as error:  # one broken plugin must not take the others down
                    warnings.warn(
                        f"kvprune: {self.kind} {point.name!r} from entry point {point.value!r} "
                        f"(group {self.entry_point_group}) is skipped: {type(error).__name__}: {error}",
                        stacklevel=3,
                    )
        return self._entries


def _same(current, entry) -> bool:
    """Whether ``entry`` may replace ``current``: the same object, an equal one, or a class or
    function defined again under the same module and name."""
    if current is entry or current == entry:
        return True
    return hasattr(current, "__qualname__") and hasattr(entry, "__qualname__") and (
        _qualified_name(current) == _qualified_name(entry)
    )


def _qualified_name(entry) -> str:
    """``module.QualName`` of a class or function; the type's for other objects."""
    target = entry if hasattr(entry, "__qualname__") else type(entry)
    return f"{target.__module__}.{target.__qualname__}"
