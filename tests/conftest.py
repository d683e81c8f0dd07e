"""Fixtures shared by several test modules."""

from __future__ import annotations

import os

import pytest
import torch


def pytest_configure(config):
    """Under pytest-xdist (``-n 2``: the README's command), each worker process takes one torch thread: two workers
    then use the two cores CI has, where each worker's default of one thread per core would make four threads."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread: tiny models gain nothing from threads and lose a lot to contention on a
    shared CPU, which also makes timings unsteady."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
