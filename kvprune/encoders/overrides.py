"""Point one attribute of one module instance at a replacement, shared by every handle that asks.

The fast encoder paths replace a method on module *instances* (never on the class, never in a
modeling file), so other models of the same class stay stock. Several handles may ask for the
same replacement (nested ``with`` blocks, a library user and the harness): the first one installs
it, every one counts, and the last one to release restores what was there before (closing the replacement
first where it holds something, such as a hook: its ``close()``).
"""

from __future__ import annotations

import weakref
from typing import Callable

import torch.nn as nn

_MISSING = object()
_OVERRIDES: "weakref.WeakKeyDictionary[nn.Module, dict[str, _Override]]" = weakref.WeakKeyDictionary()


class _Override:
    def __init__(self, module: nn.Module, name: str, replacement: Callable):
        self.previous = module.__dict__.get(name, _MISSING)  # an instance attribute someone set before us
        self.replacement = replacement
        self.users = 0
        object.__setattr__(module, name, replacement)


def acquire(module: nn.Module, name: str, make: Callable[[nn.Module], Callable]) -> Callable[[], None]:
    """Set ``module.<name> = make(module)`` unless kvprune already did; returns this user's release,
    which is safe to call twice."""
    overrides = _OVERRIDES.setdefault(module, {})
    override = overrides.get(name)
    if override is None:
        override = overrides[name] = _Override(module, name, make(module))
    override.users += 1
    released = False

    def release() -> None:
        nonlocal released
        if released:
            return
        released = True
        override.users -= 1
        if override.users == 0:
            del overrides[name]
            getattr(override.replacement, "close", lambda: None)()
            if override.previous is _MISSING:
                del module.__dict__[name]
            else:
                object.__setattr__(module, name, override.previous)

    return release

