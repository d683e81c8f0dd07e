"""LLM judges for the judged metrics (AVI-Bench's refine step, MMAR-Rubrics): an OpenAI-compatible
endpoint or a local Hugging Face model, with an on-disk cache, counts, retries and a circuit breaker."""

from .base import CachedJudge, Judge, JudgeSettings, JudgeStats, RetryPolicy
from .breaker import CircuitBreaker
from .cache import JudgementCache
from .errors import JudgeError, JudgeUnavailable, JudgeUnreachable, TransientJudgeError
from .hf_local import HFJudge
from .openai_compat import DEFAULT_KEY_ENV, OpenAIJudge
from .spec import parse_judge_spec

__all__ = [
    "CachedJudge", "CircuitBreaker", "DEFAULT_KEY_ENV", "HFJudge", "Judge", "JudgeError", "JudgeSettings", "JudgeStats",
    "JudgeUnavailable", "JudgeUnreachable", "JudgementCache", "OpenAIJudge", "RetryPolicy", "TransientJudgeError",
    "parse_judge_spec",
]
