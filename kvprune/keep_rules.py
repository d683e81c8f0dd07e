"""How many of a clip's tokens a press keeps at a ratio, and where ``frame`` places them: the keep rules.

Two keep rules exist, because published numbers were made with both:

- ``"round"`` (kvprune's): a clip of ``n`` tokens keeps ``max(1, round(n * (1 - ratio)))``.
- ``"floor"`` (AudioMarathon's scripts, and kvpress): ``max(1, int(n * (1 - ratio)))``, the product
  taken in floating point and truncated, so ``n=7, ratio=0.5`` keeps 3 where ``round`` keeps 4.
  A press with this rule also places ``frame``'s kept tokens at AudioMarathon's offsets
  (``frame_offsets``).

What a ratio itself may be is ``kvprune.ratios``'s.
"""

from __future__ import annotations

KEEP_RULES = ("round", "floor")


def validate_keep_rule(rule: str) -> str:
    if rule not in KEEP_RULES:
        raise ValueError(
            f"keep_rule={rule!r} is invalid; choose {' or '.join(KEEP_RULES)} "
            "(round: max(1, round(n * (1 - ratio))), kvprune's; floor: max(1, int(n * (1 - ratio))), AudioMarathon's)."
        )
    return rule


def keep_count(n_tokens: int, ratio: float, rule: str = "round") -> int:
    """Tokens a clip of ``n_tokens`` keeps at a pruning ratio, under a keep rule (module docstring)."""
    kept = n_tokens * (1.0 - ratio)
    return max(1, round(kept) if rule == "round" else int(kept))


def frame_offsets(n_tokens: int, kept: int, rule: str = "round") -> list[int]:
    """Offsets in a clip of the ``kept`` tokens a uniform stride keeps: ``i * n // k`` (exact integer
    arithmetic) under ``round``; ``int(i * (n / k))`` (the float step first, AudioMarathon's) under
    ``floor``. The two differ where the float step rounds down (``n=30, k=22``: offset 11 is 15 exactly,
    14 in floating point); both give ``k`` distinct offsets in ``[0, n)``."""
    if rule == "round":
        return [i * n_tokens // kept for i in range(kept)]
    step = n_tokens / kept
    return [int(i * step) for i in range(kept)]
