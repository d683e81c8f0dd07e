"""STAR-Bench's answer parser: ``starbench``."""

from __future__ import annotations

from collections.abc import Sequence

from ...parsers import register_parser
from . import rules


@register_parser("starbench")
def parse_starbench(output: str, choices: Sequence[str]) -> str | None:
    """STAR-Bench's ``parse_multi_choice_response`` with all its quirks (``rules.parse_answer``):
    its ``"<X>"`` as the letter ``X``, ``None`` for its ``"Z"``. A lower-case letter after a keyword
    (``answer: b``) stays lower-case, so it never equals a gold letter, as there."""
    parsed = rules.parse_answer(output, choices)
    return None if parsed == rules.NO_ANSWER else parsed.strip("<>")
