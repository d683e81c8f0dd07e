"""A small model on the CPU runs on one torch thread (so that a busy machine does not slow the demo
sweep many times over), unless the user chose the threads; torch's setting is restored after."""

from __future__ import annotations

import pytest
import torch

from kvprune.harness.setup import device
from kvprune.harness.setup.device import THREAD_VARIABLES, cpu_threads


@pytest.fixture
def unset(monkeypatch):
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_a_small_model_on_the_cpu_runs_on_one_thread_and_the_setting_comes_back(unset):
    with cpu_threads(torch.nn.Linear(8, 8)) as threads:
        assert threads == torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("name", THREAD_VARIABLES)
def test_threads_the_user_chose_are_kept(unset, monkeypatch, name):
    monkeypatch.setenv(name, "2")
    with cpu_threads(torch.nn.Linear(8, 8)) as threads:
        assert threads == torch.get_num_threads() == 2


def test_a_large_model_keeps_torchs_threads(unset, monkeypatch):
    monkeypatch.setattr(device, "SMALL_MODEL_PARAMETERS", 50)
    with cpu_threads(torch.nn.Linear(8, 8)) as threads:  # 72 parameters: large here
        assert threads == 2
    with cpu_threads(torch.nn.Linear(8, 8).to("meta")) as threads:  # not on the CPU
        assert threads == 2
