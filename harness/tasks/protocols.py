"""Protocols: whose conventions a task's run follows, from the prompt to the press's kept-token count.

A task follows one protocol (its ``protocol`` field) and may offer others (``protocols``: each the
task fields it changes); ``kvprune sweep --protocol NAME`` runs every task under that protocol and
gives each press the protocol's keep rule. docs/protocols.md lists every difference.
"""

from __future__ import annotations

OFFICIAL = "official"
PROTOCOLS = {
    OFFICIAL: "the benchmark's own rules, as its official code runs and scores them",
    "kvprune": "kvprune's: unparsed answers count as wrong, every clip's kept count rounded",
    "provisional": "our reading of a benchmark's paper, until it publishes its data layout and scorer",
    "audiomarathon": "the conventions of AudioMarathon's published scripts, to compare with its leaderboard",
}
KEEP_RULES = {"audiomarathon": "floor"}  # protocols whose kept-token count is not kvprune's (kvprune.ratios)


def keep_rule(protocol: str | None) -> str | None:
    """The keep rule a sweep under ``protocol`` gives every press that sets none (None: the presses' own)."""
    return KEEP_RULES.get(protocol)
