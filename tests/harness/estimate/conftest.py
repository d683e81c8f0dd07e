"""The estimate's command runs in-process in these tests, as the child that does the work
(``process_end``): its parent, which times the child's end, is tested in test_process_end.py."""

from __future__ import annotations

import pytest

from kvprune.harness.estimate.process_end import ENDED


@pytest.fixture(autouse=True)
def estimate_in_process(monkeypatch, tmp_path):
    monkeypatch.setenv(ENDED, str(tmp_path / "ended"))
