"""Dependent launches (``kvprune.generation.dependent_launch``): kvprune's decode kernels, compiled for an H100 as
dependents, wait for the kernel before them before they read any memory (else they would race it); the launches ask
for it only where the device takes it; the compiled step asks Inductor for the same in its kernels."""

from __future__ import annotations

import importlib.util
import os
import re
from types import SimpleNamespace

import pytest
import torch

from kvprune.generation import decode_attention as fused
from kvprune.generation import column_write, dependent_launch, gemv, graphs
from tests.support.triton_kernels import compile_for_h100, compile_linear_for_h100

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="needs Triton (the dev extra installs it; CPU builds of torch come without)")

compiles_for_gpu = pytest.mark.skipif(importlib.util.find_spec("triton") is None or os.environ.get("TRITON_INTERPRET") == "1",
                                      reason="compiles the kernels with Triton's GPU compiler: needs Triton, and not TRITON_INTERPRET=1")

#: PTX instructions that read global memory (plain and asynchronous loads, bulk tensor copies)
GLOBAL_READ = re.compile(r"\b(ld\.global|cp\.async|cp\.async\.bulk)")


def _grouped(pdl: bool):
    return compile_linear_for_h100(64, (16, 128, 4, 4), pdl=pdl)


def _gated(pdl: bool):
    return compile_linear_for_h100(64, (16, 128, 4, 4), gated=True, pdl=pdl)


def _split(pdl: bool):
    pointers = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", mask_ptr="*u8", last_ptr="*i64", out_ptr="*bf16",
                    acc_ptr="*fp32", max_ptr="*fp32", sum_ptr="*fp32", new_k_ptr="*bf16", new_v_ptr="*bf16")
    constants = dict(HEADS=28, GROUPS=7, DIM=128, SINGLE=False, PRECISION="tf32", UPCAST=False, BLOCK_G=16, BLOCK_D=128,
                     BLOCK_N=fused.BLOCK, ROW_ENDS=True, ROW_SPLITS=True, WRITE=True, PDL=pdl)  # as the decode step runs it
    return compile_for_h100(fused._split_kernel, pointers, constants, warps=fused.WARPS, stages=fused.DEEP_STAGES,
                            floats=("qk_scale",))


def _combine(pdl: bool):
    pointers = dict(acc_ptr="*fp32", max_ptr="*fp32", sum_ptr="*fp32", out_ptr="*bf16")
    return compile_for_h100(fused._combine_kernel, pointers, dict(DIM=128, BLOCK_S=fused.MAX_SPLITS, BLOCK_D=128, PDL=pdl),
                            warps=4, stages=fused.STAGES)


def _write(pdl: bool):
    pointers = dict.fromkeys(["keys", "values", "new_keys", "new_values"], "*bf16") | dict(columns="*i64")
    constants = dict(DIM_K=128, DIM_V=128, BLOCK_K=128, BLOCK_V=128, PDL=pdl)
    return compile_for_h100(column_write._write_kernel, pointers, constants, warps=1, stages=1)


@compiles_for_gpu
@pytest.mark.parametrize("compile_kernel", [_grouped, _gated, _split, _combine, _write],
                         ids=["linear", "gated linear", "attention", "combine", "cache write"])
def test_a_dependent_kernel_waits_for_the_one_before_until_it_reads_memory(compile_kernel):
    """As a dependent, each kernel's first instruction that reads global memory comes after ``griddepcontrol.wait``
    (it may start while the kernel before still writes its input); launched as usual, it has no such instruction."""
    dependent, usual = compile_kernel(True).asm["ptx"], compile_kernel(False).asm["ptx"]
    assert "griddepcontrol" not in usual
    wait, first_read = dependent.index("griddepcontrol.wait"), GLOBAL_READ.search(dependent).start()
    assert wait < first_read
    assert "griddepcontrol.launch_dependents" in dependent


def test_no_dependent_launch_off_cuda_or_when_switched_off(monkeypatch):
    assert not dependent_launch.dependent_launch(torch.device("cpu"))
    patches = dependent_launch.inductor_patches(torch.device("cpu"))
    assert patches in ({}, {"triton.enable_pdl": False})  # {}: an Inductor without the setting
    monkeypatch.setattr(dependent_launch, "_capable", lambda device: True)
    assert dependent_launch.dependent_launch(torch.device("cuda"))
    monkeypatch.setattr(dependent_launch, "ENABLED", False)
    assert not dependent_launch.dependent_launch(torch.device("cuda"))


class _Recorder:
    """A Triton kernel stand-in: ``kernel[grid](*args, **named)`` records the launch's named arguments."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **named: self.launches.append(named)


@needs_triton
@pytest.mark.parametrize("dependent", [True, False])
@pytest.mark.parametrize("rows", [1, 3, 17, 64])
def test_linear_launches_ask_for_a_dependent_launch_where_the_device_takes_it(monkeypatch, dependent, rows):
    """Every row block alike: the device decides, not the row count."""
    monkeypatch.setattr(dependent_launch, "dependent_launch", lambda device: dependent)
    kernel = _Recorder()
    gemv.launch(kernel, torch.randn(rows, 8), [torch.randn(5, 8)], [None], BLOCK_N=16, BLOCK_K=64)
    (named,) = kernel.launches
    assert (named.get("PDL", False), named.get("launch_pdl", False)) == (dependent, dependent)


@needs_triton
@pytest.mark.parametrize("dependent", [True, False])
def test_attention_launches_ask_for_a_dependent_launch_where_the_device_takes_it(monkeypatch, dependent):
    """Both kernels of a split cache (the split one and the combining one) are launched alike."""
    split, combine = _Recorder(), _Recorder()
    monkeypatch.setattr(dependent_launch, "dependent_launch", lambda device: dependent)
    monkeypatch.setattr(fused, "_split_kernel", split)
    monkeypatch.setattr(fused, "_combine_kernel", combine)
    query, key = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 512, 16)
    fused.flash_decode(query, key, key, torch.ones(1, 1, 1, 512, dtype=torch.bool), 0.25, chunk=64)
    for kernel in (split, combine):
        (named,) = kernel.launches
        assert (named.get("PDL", False), named.get("launch_pdl", False)) == (dependent, dependent)


@needs_triton
@pytest.mark.parametrize("dependent", [True, False])
def test_cache_write_launches_ask_for_a_dependent_launch_where_the_device_takes_it(monkeypatch, dependent):
    kernel = _Recorder()
    monkeypatch.setattr(dependent_launch, "dependent_launch", lambda device: dependent)
    monkeypatch.setattr(column_write, "_write_kernel", kernel)
    keys, new = torch.zeros(2, 3, 8, 16), torch.ones(2, 3, 1, 16)
    column_write.launch(keys, keys, torch.tensor([1, 4]), new, new)
    (named,) = kernel.launches
    assert (named.get("PDL", False), named.get("launch_pdl", False)) == (dependent, dependent)


@pytest.mark.parametrize("dependent", [True, False])
def test_the_compiled_step_asks_inductor_for_dependent_launches_where_the_device_takes_them(monkeypatch, dependent):
    """The step compiles with Inductor's ``triton.enable_pdl`` set as ``dependent_launch`` says for the state's device."""
    import torch._inductor.config as inductor_config

    if not hasattr(inductor_config.triton, "enable_pdl"):
        pytest.skip("this torch's Inductor has no dependent launches")
    monkeypatch.setattr(dependent_launch, "_capable", lambda device: True)
    monkeypatch.setattr(dependent_launch, "ENABLED", dependent)
    seen = []
    runner = graphs.StepRunner(step=lambda state: None, compile=False, cuda_graphs=False)
    runner._compiled = lambda state: seen.append(inductor_config.triton.enable_pdl)
    state = SimpleNamespace(tokens=torch.zeros(1), mark_lengths_dynamic=lambda: None,
                            shape=SimpleNamespace(grouping=(), capacities=(1,)))
    before = inductor_config.triton.enable_pdl
    runner.function(state)
    assert seen == [dependent] and inductor_config.triton.enable_pdl == before  # set for the step only
