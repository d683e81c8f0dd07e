"""LLM judges for the judged metrics (AVI-Bench's refine step, MMAR-Rubrics): an OpenAI-compatible
endpoint or a local Hugging Face model, with an on-disk cache, counts and retries."""

from .base import CachedJudge, Judge, JudgeError, JudgeSettings, JudgeStats, RetryPolicy, TransientJudgeError
from .cache import JudgementCache
from .hf_local import HFJudge
from .openai_compat import DEFAULT_KEY_ENV, OpenAIJudge
from .spec import parse_judge_spec

__all__ = [
    "CachedJudge", "DEFAULT_KEY_ENV", "HFJudge", "Judge", "JudgeError", "JudgeSettings", "JudgeStats", "JudgementCache",
    "OpenAIJudge", "RetryPolicy", "TransientJudgeError", "parse_judge_spec",
]
