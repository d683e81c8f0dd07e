"""The decode step's compiler passes (``kvprune.generation.step_passes``): the rotary tables stored once a step.
Inductor inlines a cheap pointwise value into every consumer; on the GPU the 7B's 28 layers each recomputed cos and
sin for every element of their queries and keys."""

from __future__ import annotations

import re

import pytest
import torch

from kvprune import FastVPress, Generator
from kvprune.generation import step_passes
from kvprune.generation.step_passes import StepPasses
from tests.support.helpers import NO_STOP, compiled_through, model
from tests.support.tiny_models import FAMILIES

REALIZED = torch.ops.kvprune.realized.default


class _RotaryLayers(torch.nn.Module):
    """Rotary tables computed once from the positions, as transformers' rotary embeddings do, then used by three
    layers (as a method, ``emb.cos()``, and as a function, ``torch.sin(emb)``)."""

    def forward(self, x, positions):
        freqs = positions[..., None].float() * torch.arange(1, 5).float()
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), torch.sin(emb)
        for _ in range(3):
            x = x * cos + x.flip(-1) * sin
        return x


@pytest.mark.parametrize("realize", [True, False])
def test_each_rotary_table_is_stored_once_before_its_users(monkeypatch, realize):
    monkeypatch.setattr(step_passes, "REALIZE_ROTARY", realize)
    torch.manual_seed(0)
    module, x, positions = _RotaryLayers(), torch.randn(2, 1, 8), torch.tensor([[7], [3]])
    out, nodes = compiled_through(StepPasses(fast_linear=False), module, x, positions)
    targets = [node.target for node in nodes]
    assert targets.count(REALIZED) == (2 if realize else 0)
    assert torch.equal(out, module(x, positions))
    assert StepPasses(fast_linear=False).uuid().startswith(f"kvprune.step_passes.v1.rotary={realize}.linear=False")


@pytest.mark.usefixtures("one_thread")
def test_the_compiled_step_stores_the_tables_once_and_decodes_the_same_tokens():
    """The tiny Qwen2.5-Omni (multimodal rotary: three position rows) compiled by Inductor on the CPU: the generated
    step calls the operator twice (cos, sin), not per layer, and decodes what the eager model does."""
    from torch._inductor.utils import run_and_get_code

    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs([[("text", 3), ("audio", 20), ("text", 2)]])
    press = FastVPress(layer=2, ratio=0.5)
    compiled = Generator(m, compile=True, cuda_graphs=False)
    fast, codes = run_and_get_code(lambda: compiled.generate(inputs, max_new_tokens=4, press=press, **NO_STOP))
    eager = Generator(m, compile=False).generate(inputs, max_new_tokens=4, press=press, **NO_STOP)
    assert fast.step_compiled and torch.equal(fast.new_tokens, eager.new_tokens)
    assert codes and all(len(re.findall(r"torch\.ops\.kvprune\.realized\.default\(", code)) == 2 for code in codes)
