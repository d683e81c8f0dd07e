"""The decode step's linear layers (``kvprune.generation.gemv``): the compiler pass that groups them, the
operator's fallback off the GPU, the row counts and configurations its Triton kernels take and, where Triton
is installed, the kernels themselves run by Triton's interpreter on the CPU against ``F.linear``."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from kvprune.generation import gemv
from kvprune.generation.step_passes import StepPasses
from tests.support.helpers import compiled_through
from tests.support.triton_kernels import H100_SHARED_BYTES, compile_for_h100, compile_linear_for_h100

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="needs Triton (the dev extra installs it; CPU builds of torch come without)")


class _Projections(torch.nn.Module):
    """Three projections of one input (one without bias), then one of their sum: as in an attention block."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(8, 8), torch.nn.Linear(8, 4), torch.nn.Linear(8, 4, bias=False),
                                          torch.nn.Linear(8, 8))

    def forward(self, x):
        h = x * 2
        return self.o(self.q(h) + torch.cat([self.k(h), self.v(h)], dim=-1))


class _GatedMLP(torch.nn.Module):
    """A gated MLP as transformers writes it (``act_fn(gate(x)) * up(x)``, then down), with ``extra`` another use
    of the gate's product, which keeps it apart."""

    def __init__(self, extra: bool = False):
        super().__init__()
        from transformers.activations import ACT2FN

        self.gate, self.up, self.down = (torch.nn.Linear(8, 16, bias=False), torch.nn.Linear(8, 16, bias=False),
                                         torch.nn.Linear(16, 8, bias=False))
        self.act_fn, self.extra = ACT2FN["silu"], extra

    def forward(self, x):
        gate = self.gate(x)
        out = self.down(self.act_fn(gate) * self.up(x))
        return out + gate[..., :8] if self.extra else out


def _compiled_calls(module, x, targets):
    """``module`` compiled through the step's passes with ``fast_linear``: its output, and the kvprune calls of its
    graph."""
    out, nodes = compiled_through(StepPasses(fast_linear=True), module, x)
    return out, [n.target for n in nodes if n.target in targets]


@pytest.mark.parametrize("extra", [False, True], ids=["fused", "gate used twice"])
def test_a_gated_mlp_becomes_one_gated_call(extra):
    """The gate, the activation, the up projection and their product become one ``gated_linear`` call; the down
    projection stays a (grouped) linear. Where the gate's product is used again, nothing fuses."""
    torch.manual_seed(0)
    module, x = _GatedMLP(extra), torch.randn(2, 1, 8)
    gated, grouped = torch.ops.kvprune.gated_linear.default, torch.ops.kvprune.grouped_linear.default
    out, calls = _compiled_calls(module, x, (gated, grouped))
    assert calls == ([grouped, grouped] if extra else [gated, grouped])
    torch.testing.assert_close(out, module(x))


def test_without_fuse_gates_the_pass_only_groups(monkeypatch):
    monkeypatch.setattr(gemv, "FUSE_GATES", False)
    gated = torch.ops.kvprune.gated_linear.default
    assert _compiled_calls(_GatedMLP(), torch.randn(2, 1, 8), (gated,))[1] == []
    assert StepPasses(fast_linear=True).uuid().endswith("gates=False")


def test_gated_linear_equals_silu_of_gate_times_up():
    torch.manual_seed(0)
    x, gate, up = torch.randn(3, 1, 8), torch.randn(5, 8), torch.randn(5, 8)
    torch.testing.assert_close(torch.ops.kvprune.gated_linear(x, gate, up), F.silu(F.linear(x, gate)) * F.linear(x, up))


def test_linears_reading_one_input_become_one_grouped_call():
    torch.manual_seed(0)
    module, x = _Projections(), torch.randn(1, 1, 8)
    out, nodes = compiled_through(gemv.group_linears, module, x)
    calls = [n.args[1] for n in nodes if n.target == torch.ops.kvprune.grouped_linear.default]
    assert [len(weights) for weights in calls] == [3, 1]  # q, k, v share one call; o has its own
    torch.testing.assert_close(out, module(x))


def test_grouped_linear_equals_linear_per_weight():
    torch.manual_seed(0)
    x = torch.randn(2, 1, 8)
    weights, biases = [torch.randn(5, 8), torch.randn(3, 8)], [torch.randn(5), None]
    outputs = torch.ops.kvprune.grouped_linear(x, weights, biases)
    for output, weight, bias in zip(outputs, weights, biases):
        assert torch.equal(output, F.linear(x, weight, bias))


def test_every_row_count_up_to_max_rows_gets_a_block_triton_builds():
    """``tl.arange`` and ``tl.dot`` take powers of two only (a batch of 3 rows once failed to compile on a GPU,
    and its step decoded uncompiled): each row count is padded to one, the matrix-vector kernel's 1 or a
    tensor-core tile of at least ``TILE_ROWS``; beyond ``MAX_ROWS`` the operator takes ``F.linear``."""
    for rows in range(1, gemv.MAX_ROWS + 1):
        block = gemv.padded_rows(rows)
        assert block >= rows and block & (block - 1) == 0
        assert (block == 1) == (rows == 1) and (block == 1 or block >= gemv.TILE_ROWS)
    assert not gemv._kernel_fits(torch.randn(gemv.MAX_ROWS + 1, 8), [torch.randn(4, 8)])


@needs_triton
def test_each_row_block_has_a_configuration_that_fits_an_h100():
    """Triton's shared memory for one configuration differs between versions (245,760 bytes on the H100's for BLOCK_N
    16, BLOCK_K 512, 3 stages at 64 rows; more with newer ones): the autotuner skips what does not fit, and every row
    block up to ``MAX_ROWS`` must keep one that does. The kernel's first configurations at 64 rows did not, and the
    operator failed on the GPU."""
    for rows_p in sorted({gemv.padded_rows(rows) for rows in range(1, gemv.MAX_ROWS + 1)}):
        configs = gemv.VECTOR_CONFIGS if rows_p == 1 else gemv.TILE_CONFIGS
        assert any(compile_linear_for_h100(rows_p, c).metadata.shared <= H100_SHARED_BYTES for c in configs[::-1]), rows_p
    assert compile_linear_for_h100(64, (16, 512, 4, 3)).metadata.shared > H100_SHARED_BYTES  # the GPU's failure, seen here


@needs_triton
@pytest.mark.parametrize("rows_p", [16, 64])
def test_three_weights_in_one_launch_take_the_shared_memory_of_one(rows_p):
    """The q, k and v projections' launch holds as many programs per multiprocessor as a launch of one weight: its
    shared memory is one loop's. With a branch per weight Triton gave each branch buffers of its own, three times
    one loop's, and at 64 rows the q, k, v launch read 1.56 TB/s where the o projection's read 2.2 (H100,
    2026-12-07)."""
    config = (32, 64, 4, 4)  # the autotuner's pick for the 7B's q, k, v at 64 rows
    one = compile_linear_for_h100(rows_p, config, groups=1).metadata.shared
    assert compile_linear_for_h100(rows_p, config, groups=3).metadata.shared == one


@needs_triton
@pytest.mark.parametrize("rows_p", [1, 16, 64])
def test_the_gated_kernel_fits_an_h100(rows_p):
    """Two weights' blocks a program: one configuration of each row block still fits an H100's shared memory."""
    configs = gemv.VECTOR_CONFIGS if rows_p == 1 else gemv.TILE_CONFIGS
    assert any(compile_linear_for_h100(rows_p, c, gated=True).metadata.shared <= H100_SHARED_BYTES for c in configs[::-1])


@needs_triton
def test_the_activation_kernel_builds_for_an_h100_with_wide_loads():
    """``silu_mul_``'s kernel (the gated MLP beyond ``MAX_ROWS`` rows) compiles for sm_90 and reads its two inputs
    with 16-byte vector loads: one pass over the products at the card's copy rate."""
    ptx = compile_for_h100(gemv._silu_mul_kernel, dict(gate_ptr="*bf16", up_ptr="*bf16"), dict(BLOCK=gemv.SILU_BLOCK),
                           warps=4, stages=1, aligned=("n",)).asm["ptx"]
    assert len(re.findall(r"ld\.global(\.\w+)*\.v4\.b32", ptx)) >= 2


@needs_triton
def test_a_row_block_no_configuration_fits_falls_back_to_linear(monkeypatch):
    """Where every configuration runs out of shared memory (Triton raises when the best of them does), the call
    and every later one at that row block take ``F.linear``, with one warning."""
    import triton

    launches = []

    class OutOfSharedMemory:
        """A tuned kernel whose every configuration ran out: ``kernel[grid](...)`` raises as Triton's does."""

        def __init__(self, rows_p: int):
            launches.append(rows_p)

        def __getitem__(self, grid):
            def launch(*args, **named):
                raise triton.runtime.errors.OutOfResources(491_520, H100_SHARED_BYTES, "shared memory")
            return launch

    monkeypatch.setattr(gemv, "_UNFIT", set())
    # a CPU call reaches the kernels as a GPU call would (on the CPU the real test is False at ``x.is_cuda``)
    monkeypatch.setattr(gemv, "_kernel_fits", lambda x, weights: True)
    monkeypatch.setattr(gemv, "_tuned_kernel", OutOfSharedMemory)
    x, weights, biases = torch.randn(3, 8), [torch.randn(5, 8), torch.randn(4, 8)], [torch.randn(5), None]
    with pytest.warns(RuntimeWarning, match="no configuration of the decode linear kernel fits .* at 16 rows"):
        first = gemv.grouped_linear(x, weights, biases)
    second = gemv.grouped_linear(x, weights, biases)
    for outputs in (first, second):
        assert all(torch.equal(y, F.linear(x, w, b)) for y, w, b in zip(outputs, weights, biases))
    assert launches == [16] and gemv._UNFIT == {(16, None)}  # tried once; the second call went straight to F.linear


_INTERPRETED = textwrap.dedent("""
    import torch, torch.nn.functional as F
    from kvprune.generation import gemv
    torch.manual_seed(0)
    K = 96  # two blocks of 64: the second half masked
    for rows in (1, 3, 17):  # the matrix-vector kernel; the tile kernel padded to 16 and to 32
        x = torch.randn(rows, K, dtype=torch.float16)
        weights = [torch.randn(n, K, dtype=torch.float16) for n in (40, 24, 8)]  # 40: a partial block of outputs
        biases = [torch.randn(40, dtype=torch.float16), None, torch.randn(8, dtype=torch.float16)]
        block_n = 4 if rows == 1 else 16
        outputs = gemv.launch(gemv._grouped_kernel, x, weights, biases, BLOCK_N=block_n, BLOCK_K=64)
        for y, w, b in zip(outputs, weights, biases):
            expected = F.linear(x.float(), w.float(), None if b is None else b.float())
            error = float((y.float() - expected).abs().max() / expected.abs().max())
            assert error < 2e-3, (rows, tuple(w.shape), error)
        gate, up = weights[0], torch.randn(40, K, dtype=torch.float16)
        (y,) = gemv.launch(gemv._grouped_kernel, x, [gate, up], [None, None], gated=True, BLOCK_N=block_n, BLOCK_K=64)
        g, u = (F.linear(x.float(), w.float()).half().float() for w in (gate, up))  # the products as linears leave them
        expected = F.silu(g) * u
        error = float((y.float() - expected).abs().max() / expected.abs().max())
        assert y.shape == (rows, 40) and error < 2e-3, (rows, "gated", error)
    gate, up = torch.randn(3, 700, dtype=torch.bfloat16), torch.randn(3, 700, dtype=torch.bfloat16)  # 2,100: 3 blocks
    expected = (F.silu(gate.float()) * up.float()).bfloat16()  # rounded once
    out = gemv.silu_mul_(gate, up)
    assert out is gate and torch.allclose(out.float(), expected.float(), rtol=8e-3, atol=1e-6), "silu_mul_"
    print("ok")
""")


@needs_triton
def test_the_triton_kernels_equal_linear_in_the_interpreter():
    """Both kernels, grouped over three weights (with and without bias) and gated, against float32 ``F.linear``,
    with outputs, inputs and rows that end inside a block; the activation's own kernel against torch's. ``TRITON_INTERPRET`` is read when a kernel is defined,
    so they run in a process of their own."""
    result = subprocess.run([sys.executable, "-c", _INTERPRETED], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_the_linears_bench_runs_tiny_and_groups_the_step_as_the_decode_step_does(tmp_path, monkeypatch):
    """``scripts/bench_decode_linears.py --tiny``: both variants at each row count, equal on the CPU (the operator
    takes ``F.linear`` there), a table written; the 7B layer it builds holds Qwen2's shapes and biases."""
    from kvprune.harness.bench.presets import PRESETS
    from tests.support.paths import load_script

    script = load_script("bench_decode_linears")
    monkeypatch.setattr(gemv, "MAX_ROWS", gemv.MAX_ROWS)  # the script lifts it
    results = script.main(["--tiny", "--out", str(tmp_path), "--rows", "1,3", "--repeats", "1"])
    assert [(r["rows"], r["variant"]) for r in results] == [(1, "cublas"), (1, "kvprune"), (3, "cublas"), (3, "kvprune")]
    assert all(r["max_rel_err"] == 0.0 and r["ms"] > 0 for r in results)
    assert "| 3 |" in (tmp_path / "linears.md").read_text()
    layer = script.layer_weights(PRESETS.get("qwen2.5-omni-7b").config().get_text_config(), "meta", torch.bfloat16)
    shapes = {name: [tuple(w.shape) for w in weights] for name, (weights, _) in layer.items()}
    assert shapes == {"qkv": [(3584, 3584), (512, 3584), (512, 3584)], "o": [(3584, 3584)],
                      "gate_up": [(18944, 3584), (18944, 3584)], "down": [(3584, 18944)]}
    assert [b is not None for b in layer["qkv"][1]] == [True, True, True]
