"""The repository's folders, for tests that read its files (README, scripts, sweep files, official data)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OFFICIAL_DATA = REPO / "tests" / "data" / "official"  # metadata shipped by the benchmarks, for parity tests
