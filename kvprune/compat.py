"""Differences between the transformers versions kvprune supports (5.17 .. 5.x), in one place."""

from __future__ import annotations

import inspect
from typing import Any

# transformers renamed the cache argument and output field from past_key_values to cache in 5.2x
CACHE_NAMES = ("cache", "past_key_values")


def find_cache(kwargs: dict) -> Any:
    """The cache passed to a forward call, under either name."""
    for name in CACHE_NAMES:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def output_cache(output: Any) -> Any:
    """The cache a forward call returned, under either name."""
    for name in CACHE_NAMES:
        value = output.get(name) if isinstance(output, dict) else getattr(output, name, None)
        if value is not None:
            return value
    return None


def cache_argument(decoder) -> str:
    """The name this transformers version gives the cache argument (``cache`` or ``past_key_values``),
    read from the text ``decoder``, which declares it even where the model passes it on as a keyword."""
    parameters = inspect.signature(decoder.forward).parameters
    return next((name for name in CACHE_NAMES if name in parameters), CACHE_NAMES[1])
