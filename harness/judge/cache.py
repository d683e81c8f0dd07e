"""Judgements on disk, one JSON file per request, keyed by a hash of everything that shapes the reply.

The key is the SHA-256 of the canonical JSON of ``[identity, messages, settings, draw]``: the judge's
identity (endpoint URL and model name, or a local model's content fingerprint), the full messages,
the generation settings and the draw label. A rerun with the same inputs therefore sends nothing.
Files are written to a temporary name and renamed, so an interrupted run never leaves half a record.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


class JudgementCache:
    """A folder of ``<key[:2]>/<key>.json`` records holding the request and its ``reply``."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    @staticmethod
    def key(identity: str, messages: list[dict[str, str]], settings: dict[str, Any], draw: int | str) -> str:
        canonical = json.dumps([identity, messages, settings, draw], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The cached reply, or ``None``; a record that does not parse is treated as absent."""
        try:
            record = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        reply = record.get("reply") if isinstance(record, dict) else None
        return reply if isinstance(reply, str) else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(record, stream, ensure_ascii=False, indent=1)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
