"""Reading benchmark metadata files: a JSON document or JSON lines, optionally gzipped."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def read_records(path: Path | str) -> Any:
    """The content of a ``.json`` file (any JSON value) or a ``.jsonl`` file (a list, one value per
    non-blank line), either optionally ``.gz``. Raises ValueError naming the file, and for JSON lines
    the line, when the text is not valid JSON."""
    path = Path(path)
    name = path.name.removesuffix(".gz")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        if name.endswith(".jsonl"):
            records = []
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as error:
                        raise ValueError(f"{path} line {number} is not valid JSON ({error})") from None
            return records
        if not name.endswith(".json"):
            raise ValueError(f"{path}: expected a .json or .jsonl file (optionally .gz)")
        try:
            return json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error})") from None
