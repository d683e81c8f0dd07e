"""A judge that is a local Hugging Face causal LM: ``from_pretrained`` on a folder, the tokenizer's
chat template, greedy decoding.

The cache identity is a fingerprint of the folder's content (every file's name and size, and a hash
of each file, of its first and last MiB for files over 16 MiB), so a moved folder keeps its cached
judgements and a changed model does not reuse them. The model loads on the first request that the
cache cannot answer, so a fully cached rerun never loads it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .base import CachedJudge, JudgeSettings, RetryPolicy
from .breaker import CircuitBreaker
from .cache import JudgementCache
from .errors import JudgeError

DEFAULT_MAX_NEW_TOKENS = 1024
_WHOLE_FILE_LIMIT = 16 * 2**20
_EDGE = 2**20


class HFJudge(CachedJudge):
    """``path``: a folder with ``config.json``, weights and a tokenizer that has a chat template.
    ``dtype``: a torch dtype name (``"bfloat16"``) or ``None`` for the checkpoint's."""

    def __init__(self, path: str | os.PathLike, device: str = "cpu", dtype: str | None = None,
                 cache: JudgementCache | None = None, retry: RetryPolicy | None = None,
                 breaker: CircuitBreaker | None = None):
        super().__init__(cache, retry, breaker)
        self.path = Path(path)
        if not (self.path / "config.json").is_file():
            raise ValueError(f"judge model folder {self.path} has no config.json; give a folder written by "
                             "save_pretrained (a local copy of an instruction-tuned causal LM)")
        self.device = device
        self.dtype = dtype
        self.identity = f"hf:{fingerprint(self.path)}"
        self.label = f"hf:{self.path}"
        self._model = self._tokenizer = None

    def _request(self, messages: list[dict[str, str]], settings: JudgeSettings) -> str:
        if settings.temperature not in (None, 0, 0.0):
            raise JudgeError(f"{self.label}: a local judge decodes greedily; temperature {settings.temperature} "
                             "cannot be honoured")
        import torch

        model, tokenizer = self._load()
        try:
            inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                   return_dict=True).to(model.device)
            with torch.inference_mode():
                output = model.generate(**inputs, do_sample=False,
                                        max_new_tokens=settings.max_tokens or DEFAULT_MAX_NEW_TOKENS)
        except Exception as error:
            raise JudgeError(f"{self.label}: generation failed: {error!r}") from error
        return tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)

    def _load(self):
        if self._model is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            try:
                tokenizer = AutoTokenizer.from_pretrained(self.path)
                model = AutoModelForCausalLM.from_pretrained(self.path, dtype=self.dtype or "auto")
            except Exception as error:
                raise JudgeError(f"{self.label}: cannot load the judge model: {error!r}") from error
            if not getattr(tokenizer, "chat_template", None):
                raise JudgeError(f"{self.label}: the tokenizer has no chat template; a judge must be an "
                                 "instruction-tuned model whose folder carries one")
            self._model, self._tokenizer = model.to(self.device).eval(), tokenizer
        return self._model, self._tokenizer


def fingerprint(folder: Path) -> str:
    """SHA-256 over the folder's files (relative name, size, content hash), in name order."""
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        size = file.stat().st_size
        digest.update(f"{file.relative_to(folder).as_posix()}\0{size}\0".encode())
        with open(file, "rb") as stream:
            if size <= _WHOLE_FILE_LIMIT:
                digest.update(hashlib.sha256(stream.read()).digest())
            else:
                head = stream.read(_EDGE)
                stream.seek(size - _EDGE)
                digest.update(hashlib.sha256(head + stream.read(_EDGE)).digest())
    return digest.hexdigest()
