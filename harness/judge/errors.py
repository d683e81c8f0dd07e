"""What a judge fails with. Callers turn every one into an error row, never into a score."""

from __future__ import annotations


class JudgeError(RuntimeError):
    """A judgement that could not be had: the message names the judge and the last failure."""


class TransientJudgeError(JudgeError):
    """A failure worth retrying (connection refused or reset, timeout, HTTP 429 or 5xx)."""


class JudgeUnreachable(TransientJudgeError):
    """A try that got no reply at all (connection refused or reset, a name that does not resolve, a
    timeout): what the circuit breaker counts (``breaker``)."""


class JudgeUnavailable(JudgeError):
    """Not asked: the judge's circuit breaker is open (its endpoint stopped replying)."""


def judge_error_names() -> set[str]:
    """The class names of every judge error: how a result row's error (``"<name>: <message>"``) tells
    that the judge, not the model, failed."""
    names, pending = set(), [JudgeError]
    while pending:
        kind = pending.pop()
        names.add(kind.__name__)
        pending += kind.__subclasses__()
    return names
