"""Word-level edit distance, the arithmetic behind every WER here (kvprune's and AudioMarathon's)."""

from __future__ import annotations

from collections.abc import Sequence


def edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Substitutions + deletions + insertions turning ``reference`` into ``hypothesis`` (Levenshtein
    over words, as jiwer counts them)."""
    previous = list(range(len(hypothesis) + 1))  # distance from reference[:0] to each prefix of hypothesis
    for i, ref_word in enumerate(reference, start=1):
        current = [i]
        for j, hyp_word in enumerate(hypothesis, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref_word != hyp_word)))
        previous = current
    return previous[-1]
