"""Model families kvprune can prune, one module per family.

Importing this package imports every module in it, and each family module registers its family
(``register_family``), so a family is added by its module alone; the registry then holds the
families in the modules' alphabetical order. Each declaration is importable from here too, under
the name its module gives it (``from kvprune.models import QWEN2_5_OMNI``).
"""

import importlib
import pkgutil

from .base import (
    FAMILIES,
    ModelFamily,
    UnsupportedModelError,
    list_families,
    register_family,
    resolve_family,
)
from .parts import Loading, Prompting, Structure, Tiny


def _import_every_module() -> dict[str, ModelFamily]:
    """Import each module of this package; the family declarations they define, by name."""
    declared = {}
    for module in pkgutil.iter_modules(__path__):
        names = vars(importlib.import_module(f"{__name__}.{module.name}"))
        declared.update({name: value for name, value in names.items() if isinstance(value, ModelFamily)})
    return declared


_DECLARED = _import_every_module()
globals().update(_DECLARED)

__all__ = [
    *sorted(_DECLARED),
    "FAMILIES",
    "Loading",
    "ModelFamily",
    "Prompting",
    "Structure",
    "Tiny",
    "UnsupportedModelError",
    "list_families",
    "register_family",
    "resolve_family",
]
