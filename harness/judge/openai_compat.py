"""A judge behind an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, LiteLLM...),
spoken to with the standard library only.

``POST <base_url>/chat/completions`` with ``{"model", "messages"}`` plus the settings that are set
(``temperature``, ``max_tokens``, ``seed``); the reply is ``choices[0].message.content``. The API key
is read, at each request, from the environment variable the judge was given (default
``KVPRUNE_JUDGE_API_KEY``); without it no ``Authorization`` header is sent (local servers need none).
Connection errors, timeouts, HTTP 429 and 5xx, and an empty ``content`` are retried; any other HTTP
error fails at once with the server's words. Tries that get no reply at all (refused, reset, a name
that does not resolve, a timeout) also count towards the judge's circuit breaker (``breaker``).
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request

from .base import CachedJudge, JudgeSettings, RetryPolicy
from .breaker import CircuitBreaker
from .cache import JudgementCache
from .errors import JudgeError, JudgeUnreachable, TransientJudgeError

DEFAULT_KEY_ENV = "KVPRUNE_JUDGE_API_KEY"
DEFAULT_TIMEOUT = 120.0


class OpenAIJudge(CachedJudge):
    """``base_url`` is the API root (``http://host:port/v1``); ``model`` the served model's name."""

    def __init__(self, base_url: str, model: str, *, key_env: str = DEFAULT_KEY_ENV, timeout: float = DEFAULT_TIMEOUT,
                 cache: JudgementCache | None = None, retry: RetryPolicy | None = None,
                 breaker: CircuitBreaker | None = None):
        super().__init__(cache, retry, breaker)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"judge base URL must start with http:// or https://, got {base_url!r}")
        if not model:
            raise ValueError("an OpenAI-compatible judge needs a model name")
        if timeout <= 0:
            raise ValueError(f"judge timeout must be > 0 seconds, got {timeout}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.key_env = key_env
        self.timeout = timeout
        self.identity = self.label = f"openai:{self.base_url}@{model}"

    def _request(self, messages: list[dict[str, str]], settings: JudgeSettings) -> str:
        body = {"model": self.model, "messages": messages}
        body.update({k: v for k, v in vars(settings).items() if v is not None})
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(f"{self.base_url}/chat/completions", json.dumps(body).encode("utf-8"),
                                         headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise self._http_error(error) from error
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as error:
            raise JudgeUnreachable(f"{self.label}: {getattr(error, 'reason', None) or error}") from error
        return self._content(payload)

    def _http_error(self, error: urllib.error.HTTPError) -> JudgeError:
        detail = error.read()[:300].decode("utf-8", "replace")
        message = f"{self.label}: HTTP {error.code} {error.reason}: {detail}"
        if error.code == 429 or error.code >= 500:
            return TransientJudgeError(message)
        if error.code in (401, 403):
            message += f" (is the API key in the environment variable {self.key_env}?)"
        return JudgeError(message)

    def _content(self, payload: bytes) -> str:
        try:
            reply = json.loads(payload)
            content = reply["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as error:
            shown = payload[:300].decode("utf-8", "replace")
            raise JudgeError(f"{self.label}: not a chat-completions reply ({error!r}): {shown}") from error
        if content is None:
            raise TransientJudgeError(f"{self.label}: the reply has no content")
        if not isinstance(content, str):
            raise JudgeError(f"{self.label}: reply content is not text: {content!r}")
        return content

