"""The command-line spelling of a judge, parsed into one.

    openai:<base URL>@<model>[;key_env=NAME][;timeout=SECONDS]
        an OpenAI-compatible endpoint, e.g. ``openai:http://127.0.0.1:8000/v1@Qwen2.5-7B-Instruct``;
        the API key comes from the environment variable NAME (default KVPRUNE_JUDGE_API_KEY)
    hf:<folder>[;device=DEVICE][;dtype=DTYPE]
        a local Hugging Face causal LM, e.g. ``hf:/models/Qwen2.5-7B-Instruct;device=cuda:0``

The model name is everything after the last ``@`` of the target. Options follow ``;`` as
``name=value``; an unknown or repeated option, a missing part or a bad value is a ValueError that
shows the expected form.
"""

from __future__ import annotations

import os

from .base import Judge, RetryPolicy
from .breaker import CircuitBreaker
from .cache import JudgementCache
from .hf_local import HFJudge
from .openai_compat import DEFAULT_KEY_ENV, DEFAULT_TIMEOUT, OpenAIJudge

FORMS = ("openai:<base URL>@<model>[;key_env=NAME][;timeout=SECONDS]", "hf:<folder>[;device=DEVICE][;dtype=DTYPE]")
OPTIONS = {"openai": ("key_env", "timeout"), "hf": ("device", "dtype")}


def parse_judge_spec(spec: str, cache_dir: str | os.PathLike | None = None, retry: RetryPolicy | None = None,
                     breaker: CircuitBreaker | None = None) -> Judge:
    """The judge ``spec`` names, caching its judgements under ``cache_dir`` (none if ``None``), with
    ``retry`` and ``breaker`` (the defaults if ``None``)."""
    kind, _, rest = spec.partition(":")
    if kind not in OPTIONS or not rest:
        raise ValueError(_bad(spec, "it must start with 'openai:' or 'hf:' and name a target"))
    target, *pairs = rest.split(";")
    options = _options(spec, kind, pairs)
    cache = JudgementCache(cache_dir) if cache_dir is not None else None
    if kind == "hf":
        if not target:
            raise ValueError(_bad(spec, "hf: needs a model folder"))
        return HFJudge(target, device=options.get("device", "cpu"), dtype=options.get("dtype"), cache=cache, retry=retry,
                       breaker=breaker)
    base_url, at, model = target.rpartition("@")
    if not at or not base_url or not model:
        raise ValueError(_bad(spec, "openai: needs '<base URL>@<model>'"))
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(_bad(spec, f"the base URL {base_url!r} must start with http:// or https://"))
    key_env = options.get("key_env", DEFAULT_KEY_ENV)
    if not key_env.isidentifier():
        raise ValueError(_bad(spec, f"key_env {key_env!r} is not an environment variable name"))
    return OpenAIJudge(base_url, model, key_env=key_env, timeout=_seconds(spec, options), cache=cache, retry=retry,
                       breaker=breaker)


def _options(spec: str, kind: str, pairs: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if name not in OPTIONS[kind] or not equals or not value:
            raise ValueError(_bad(spec, f"option {pair!r}: {kind}: takes name=value with a name among {OPTIONS[kind]}"))
        if name in options:
            raise ValueError(_bad(spec, f"option {name!r} is given twice"))
        options[name] = value
    return options


def _seconds(spec: str, options: dict[str, str]) -> float:
    try:
        timeout = float(options.get("timeout", DEFAULT_TIMEOUT))
    except ValueError:
        raise ValueError(_bad(spec, f"timeout {options['timeout']!r} is not a number of seconds")) from None
    if not timeout > 0:
        raise ValueError(_bad(spec, f"timeout must be > 0 seconds, got {timeout}"))
    return timeout


def _bad(spec: str, why: str) -> str:
    return f"bad judge spec {spec!r}: {why}; expected one of: " + " | ".join(FORMS)
