"""MMAU's parser for reasoning models (ours): ``answer_span``."""

from __future__ import annotations

from collections.abc import Sequence

from ...parsers import register_parser
from .rules import answer_span


@register_parser("answer_span")
def parse_answer_span(output: str, choices: Sequence[str] = ()) -> str:
    """The text of the last ``<answer>...</answer>`` in the reply, else the whole reply (ours, for
    reasoning models: MMAR's scripts take the final answer apart from the reasoning)."""
    return answer_span(output)
