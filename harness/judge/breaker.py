"""The circuit breaker of a judge: after ``threshold`` tries in a row that got no reply at all
(connection refused or reset, a name that does not resolve, a timeout), the judge stops asking.

Retries ride out a blip in one request; the breaker is shared by every request of one judge (one
sweep start), so a judge whose endpoint is down costs a handful of tries in all, not five per
distinct request: with the default retry policy (5 tries, 1 + 2 + 4 + 8 s apart) it opens about 15 s
after the first refused connection. Any reply (an answer, an HTTP error) closes the count again.
Once open it stays open: every later request fails at once with ``JudgeUnavailable``, whose one
sentence names the endpoint and how to resume (the sweep's ``--retry-errors``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import JudgeUnavailable, JudgeUnreachable

DEFAULT_THRESHOLD = 5


@dataclass
class CircuitBreaker:
    """``threshold`` consecutive unreachable tries open it; ``on_open(message)`` is told once when it
    does (the sweep prints it at once)."""

    threshold: int = DEFAULT_THRESHOLD
    on_open: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    consecutive: int = 0
    opened: str | None = None  # the sentence every later request fails with, once open

    def __post_init__(self):
        if self.threshold < 1:
            raise ValueError(f"a circuit breaker opens after at least 1 failure, got {self.threshold}")

    def check(self) -> None:
        """Raise ``JudgeUnavailable`` when open: the request is not sent."""
        if self.opened is not None:
            raise JudgeUnavailable(self.opened)

    def replied(self) -> None:
        """The endpoint answered (whatever it said): it is reachable."""
        self.consecutive = 0

    def unreachable(self, label: str, error: JudgeUnreachable) -> None:
        """A try got no reply; at the threshold the breaker opens and this raises ``JudgeUnavailable``."""
        self.consecutive += 1
        if self.consecutive < self.threshold:
            return
        self.opened = (f"judge {label} stopped being asked after {self.consecutive} tries in a row got no reply "
                       f"(last: {_cause(error, label)}): start it or correct its URL, then rerun the sweep with "
                       "--retry-errors to judge the samples left unjudged.")
        if self.on_open is not None:
            self.on_open(self.opened)
        raise JudgeUnavailable(self.opened) from error


def _cause(error: Exception, label: str) -> str:
    """The failure without the judge's label in front (the sentence names the judge once)."""
    text = str(error)
    return text[len(label) + 2:] if text.startswith(f"{label}: ") else text
