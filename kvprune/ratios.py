"""What a pruning ratio may be: the fraction of audio tokens removed, in [0, 1).

A ratio is checked once (``validate_ratio``), and the value that passed is a ``Ratio``: where the harness
parses ``--ratios`` (before torch is imported, so a bad ratio stops a sweep at once), or where a press is
given a plain number. A press built at a ratio the harness parsed holds it as it is. How many tokens a
ratio keeps is ``kvprune.keep_rules``'s.
"""

from __future__ import annotations


class Ratio(float):
    """A pruning ratio that ``validate_ratio`` passed (made only there): a float in [0, 1)."""


def validate_ratio(ratio) -> Ratio:
    """``ratio`` as a ``Ratio``, or the error that says what a ratio is (0 keeps everything, 0.9 drops 90%)."""
    if isinstance(ratio, Ratio):
        return ratio
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= float(ratio) < 1.0:
        raise ValueError(
            f"ratio={ratio!r} is invalid: it is the fraction of audio tokens removed and must lie in [0, 1) "
            "(0 keeps everything, 0.9 drops 90%)."
        )
    return Ratio(ratio)
