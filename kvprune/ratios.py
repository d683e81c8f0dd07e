"""The ratio policy shared by every press: what a ratio means and how many tokens it keeps."""

from __future__ import annotations


def validate_ratio(ratio: float) -> float:
    """Ratios are the fraction of audio tokens removed, in [0, 1)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= float(ratio) < 1.0:
        raise ValueError(
            f"ratio={ratio!r} is invalid: it is the fraction of audio tokens removed and must lie in [0, 1) "
            "(0 keeps everything, 0.9 drops 90%)."
        )
    return float(ratio)


def keep_count(n_tokens: int, ratio: float) -> int:
    """Tokens a clip keeps at a pruning ratio: ``max(1, round(n * (1 - ratio)))`` (Python round)."""
    return max(1, round(n_tokens * (1.0 - ratio)))
