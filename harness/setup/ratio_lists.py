"""Ratio lists as users write them: ``0.1..0.9`` (step 0.1), ``0.1..0.9:0.2``, or ``0,0.5,0.9``.
A range may run downwards (``0.9..0.1`` is the same ratios). Shared by ``kvprune sweep`` (which sorts the
ratios and drops repeats) and ``kvprune bench`` (which drops repeats, keeping the order given)."""

from __future__ import annotations

from kvprune.ratios import Ratio, validate_ratio


def parse_ratios(text: str | float | list) -> list[Ratio]:
    """Parse a ratio specification into checked ratios (``Ratio``: each in [0, 1))."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return [validate_ratio(text)]
    if isinstance(text, (list, tuple)):
        return [r for item in text for r in parse_ratios(item)]
    text = str(text).replace(" ", "")
    try:
        if ".." in text:
            bounds, _, step = text.partition(":")
            start, stop = sorted(float(x) for x in bounds.split(".."))
            step = float(step) if step else 0.1
            if step <= 0:
                raise ValueError
            count = int(round((stop - start) / step)) + 1
            ratios = [round(start + i * step, 10) for i in range(count) if start + i * step <= stop + 1e-9]
        else:
            ratios = [float(x) for x in text.split(",") if x]
    except ValueError:
        raise ValueError(
            f"cannot read ratios {text!r}: write a range '0.1..0.9' (step 0.1), '0.1..0.9:0.2', or a list '0,0.5,0.9'."
        ) from None
    if not ratios:
        raise ValueError(f"ratios {text!r} name no ratio: write a range '0.1..0.9', or a list '0,0.5,0.9'.")
    return [validate_ratio(r) for r in ratios]
