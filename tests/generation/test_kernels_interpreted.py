"""The tests of the decode attention's and the cache write's Triton kernels, in Triton's interpreter on the CPU.

Triton reads ``TRITON_INTERPRET`` when a kernel is defined (at import), so those tests skip in a plain run on a CPU;
here they run in a pytest process of their own with it set, so that CI (which installs Triton with the dev extra)
checks the kernels' results on every change, not only on a GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO

COMPILE_ONLY = "compiles the kernels with Triton's GPU compiler"  # the one skip expected there: they need the GPU compiler


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton (the dev extra installs it)")
def test_the_decode_kernels_pass_in_the_interpreter():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/generation/test_decode_attention.py",
         "tests/generation/test_column_write.py"],
        cwd=REPO, capture_output=True, text=True, timeout=900, env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    skips = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all(COMPILE_ONLY in line for line in skips), skips  # every kernel test ran
