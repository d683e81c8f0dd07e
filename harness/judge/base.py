"""What every judge shares: the request it answers, the on-disk cache, the counts and the retries.

A judge turns chat messages (``[{"role": "system" | "user" | "assistant", "content": str}, ...]``)
into one reply. Two backends exist (an OpenAI-compatible endpoint, a local Hugging Face model); both
derive from ``CachedJudge``, which looks the request up in the cache before asking, retries
transient failures with exponential backoff, stops asking an endpoint that does not reply (its
``CircuitBreaker``, shared by all its requests), and counts what it did so a report can say how
many judgements were asked, answered from the cache, failed, or were not asked. A judge that keeps
failing raises ``JudgeError``: callers turn it into an error row, never into a score.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from .breaker import CircuitBreaker
from .cache import JudgementCache
from .errors import JudgeError, JudgeUnavailable, JudgeUnreachable, TransientJudgeError

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class JudgeSettings:
    """Generation settings sent with a request; ``None`` leaves the backend's default. Part of the
    cache key, so the same messages under other settings are a different judgement."""

    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None

    def __post_init__(self):
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; before try ``k`` (k >= 1) wait ``min(base_delay * 2**(k-1),
    max_delay)`` seconds. ``sleep`` is injectable so tests need not wait."""

    attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError(f"a judge needs at least 1 attempt, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("retry delays must be >= 0")

    def delay(self, attempt: int) -> float:
        """The wait before try ``attempt`` (0-based; the first try does not wait)."""
        return min(self.base_delay * 2 ** (attempt - 1), self.max_delay) if attempt else 0.0


@dataclass
class JudgeStats:
    """What a judge did: requests sent to the backend (each try counts), judgements answered from
    the cache, retries after a transient failure, judgements that failed for good, and judgements
    not asked because the circuit breaker was open (``skipped``)."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@runtime_checkable
class Judge(Protocol):
    """Anything that answers chat messages with one reply, under a stable ``identity`` (which backend,
    which model) and keeps ``stats``. ``draw`` tells apart repeated asks of the same request (e.g.
    MMAR-Rubrics' five raters): it goes into the cache key, never to the backend."""

    identity: str
    stats: JudgeStats

    def complete(self, messages: Sequence[Mapping[str, str]], settings: JudgeSettings = ..., draw: int | str = 0) -> str:
        ...


class CachedJudge:
    """Cache, retries, the circuit breaker and counts around one backend request (``_request``,
    which subclasses give). Subclasses set ``identity`` (the cache's notion of "the same judge") and
    ``label`` (how errors name it)."""

    identity: str
    label: str

    def __init__(self, cache: JudgementCache | None = None, retry: RetryPolicy | None = None,
                 breaker: CircuitBreaker | None = None):
        self.cache = cache
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or CircuitBreaker()
        self.stats = JudgeStats()

    def complete(self, messages: Sequence[Mapping[str, str]], settings: JudgeSettings = JudgeSettings(),
                 draw: int | str = 0) -> str:
        """The reply to ``messages``: from the cache when this exact request (judge identity, messages,
        settings, draw) was answered before, else from the backend, then stored."""
        messages = check_messages(messages)
        key = None
        if self.cache is not None:
            key = self.cache.key(self.identity, messages, asdict(settings), draw)
            cached = self.cache.get(key)
            if cached is not None:
                self.stats.cache_hits += 1
                return cached
        reply = self._ask(messages, settings)
        if self.cache is not None:
            self.cache.put(key, {"identity": self.identity, "messages": messages, "settings": asdict(settings),
                                 "draw": draw, "reply": reply})
        return reply

    def _ask(self, messages: list[dict[str, str]], settings: JudgeSettings) -> str:
        try:
            self.breaker.check()
        except JudgeUnavailable:
            self.stats.skipped += 1
            raise
        last: JudgeError | None = None
        for attempt in range(self.retry.attempts):
            if attempt:
                self.stats.retries += 1
                self.retry.sleep(self.retry.delay(attempt))
            self.stats.requests += 1
            try:
                reply = self._request(messages, settings)
            except JudgeUnreachable as error:
                last = error
                try:
                    self.breaker.unreachable(self.label, error)
                except JudgeUnavailable:
                    self.stats.failures += 1
                    raise
                continue
            except TransientJudgeError as error:
                self.breaker.replied()
                last = error
                continue
            except JudgeError:
                self.breaker.replied()
                self.stats.failures += 1
                raise
            self.breaker.replied()
            return reply
        self.stats.failures += 1
        raise JudgeError(f"judge {self.label} failed after {self.retry.attempts} attempts; last: {last}") from last

    def _request(self, messages: list[dict[str, str]], settings: JudgeSettings) -> str:
        raise NotImplementedError


def check_messages(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The messages as plain dicts, or a ValueError naming what is wrong with them."""
    if isinstance(messages, (str, bytes)) or not messages:
        raise ValueError("a judge request is a non-empty list of {'role', 'content'} messages")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or set(message) != {"role", "content"}:
            raise ValueError(f"message {i} must have exactly the keys 'role' and 'content', got {message!r}")
        if message["role"] not in ROLES or not isinstance(message["content"], str):
            raise ValueError(f"message {i}: role must be one of {ROLES} and content a string, got {message!r}")
        checked.append({"role": message["role"], "content": message["content"]})
    return checked
