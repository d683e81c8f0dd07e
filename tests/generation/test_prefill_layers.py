"""The prefill's decoder layers >= K compiled (``prefill_layers``): the same tokens as the layers as written, the
press's hooks still around them, a layer that a press looks inside left as written, a compiler failure said once.

A counting backend stands in for Inductor (which takes minutes on these CPUs): it runs the graphs Dynamo traced,
so what is checked is the tracing of the real layers with the real hooks around them."""

from __future__ import annotations

import pytest
import torch

from kvprune import FastVPress, Generator, SnapKVPress
from kvprune.generation.prefill import COMPILED_LAYERS, prefill_layers_way
from kvprune.generation.prefill_layers import CompiledLayers
from kvprune.models import resolve_family
from tests.support.helpers import NO_STOP, model
from tests.support.tiny_models import FAMILIES

ROWS = [[("text", 3), ("audio", 12), ("text", 4)], [("text", 6), ("audio", 8), ("text", 2)]]
K = 2


class CountingBackend:
    """A ``torch.compile`` backend that runs each traced graph as traced, counting graphs and their calls."""

    def __init__(self):
        self.graphs = self.calls = 0

    def __call__(self, graph, example_inputs):
        self.graphs += 1

        def run(*args):
            self.calls += 1
            return graph.forward(*args)

        return run


class FailingBackend:
    def __call__(self, graph, example_inputs):
        raise RuntimeError("this backend compiles nothing")


def compiled_tokens(m, inputs, press, backend, calls=1):
    """Tokens of ``calls`` engine calls with layers >= K compiled by ``backend``, and the layers object."""
    generator = Generator(m)
    layers = CompiledLayers(resolve_family(generator.module).layers(generator.module), K, backend=backend)
    COMPILED_LAYERS[generator.module] = layers
    try:
        outs = [generator.generate(inputs, max_new_tokens=8, press=press, **NO_STOP).new_tokens for _ in range(calls)]
    finally:
        COMPILED_LAYERS.pop(generator.module)
    return outs, layers


@pytest.mark.parametrize("family", ["qwen2_5_omni", "voxtral", "phi4_multimodal", "aero"])
@pytest.mark.parametrize("press", [None, FastVPress(layer=K, ratio=0.5)], ids=["unpruned", "fastv"])
def test_compiled_layers_give_the_tokens_of_the_layers_as_written(family, press):
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    plain = Generator(m).generate(inputs, max_new_tokens=8, press=press, **NO_STOP).new_tokens
    backend = CountingBackend()
    (tokens,), layers = compiled_tokens(m, inputs, press, backend)
    assert torch.equal(tokens, plain)
    assert backend.calls == len(layers.layers) > 0  # every layer >= K ran compiled, once (one prefill)
    assert all("forward" not in layer.__dict__ for layer in layers.layers)  # decoding runs the layers as written


def test_a_layer_a_press_looks_inside_runs_as_written():
    """SnapKV records each compressed layer's queries inside its attention: those layers are not compiled."""
    family = "qwen2_5_omni"
    m, inputs, press = model(family, "sdpa"), FAMILIES[family].inputs(ROWS), SnapKVPress(ratio=0.6, window=4)
    plain = Generator(m).generate(inputs, max_new_tokens=8, press=press, **NO_STOP).new_tokens
    backend = CountingBackend()
    (tokens,), _ = compiled_tokens(m, inputs, press, backend)
    assert torch.equal(tokens, plain)
    assert backend.calls == 0


def test_how_the_prefill_layers_ran_is_compiled_as_written_or_as_written_with_the_compiler_s_reason():
    m, inputs, press = model("voxtral", "sdpa"), FAMILIES["voxtral"].inputs(ROWS), FastVPress(layer=K, ratio=0.5)
    assert prefill_layers_way(Generator(m).module) == "as written"  # the default on a CPU
    _, compiled = compiled_tokens(m, inputs, press, CountingBackend())
    assert compiled.failed is None
    with pytest.warns(RuntimeWarning, match="could not compile"):
        _, failed = compiled_tokens(m, inputs, press, FailingBackend())
    for layers, said in ((compiled, "compiled"), (failed, "as written: ")):
        generator = Generator(m)
        COMPILED_LAYERS[generator.module] = layers
        try:
            assert prefill_layers_way(generator.module).startswith(said)
        finally:
            COMPILED_LAYERS.pop(generator.module)
    assert "this backend compiles nothing" in failed.failed


def test_a_compiler_failure_is_said_once_and_the_layers_run_as_written():
    family = "voxtral"
    m, inputs, press = model(family, "sdpa"), FAMILIES[family].inputs(ROWS), FastVPress(layer=K, ratio=0.5)
    plain = Generator(m).generate(inputs, max_new_tokens=8, press=press, **NO_STOP).new_tokens
    with pytest.warns(RuntimeWarning, match="decoder layers >= 2 could not compile") as said:
        tokens, layers = compiled_tokens(m, inputs, press, FailingBackend(), calls=2)
    assert len(said) == 1 and "this backend compiles nothing" in layers.failed
    assert all(torch.equal(t, plain) for t in tokens)


def test_the_engine_compiles_its_prefill_layers_by_default_only_where_its_decoding_compiles_on_cuda():
    """"auto" (the default) is on where the step compiles on CUDA: on a CPU it stays off even with ``compile=True``
    (Inductor takes minutes there); True and False are taken as given."""
    m = model("qwen2_5_omni", "sdpa")
    for kwargs in ({}, dict(compile=True), dict(compile_prefill="auto")):
        generator = Generator(m, **kwargs)
        assert generator.compile_prefill is False and generator.module not in COMPILED_LAYERS
    asked = Generator(m, compile_prefill=True)
    try:
        assert asked.compile_prefill is True and asked.module in COMPILED_LAYERS
    finally:
        Generator(m)
    assert Generator(m, compile_prefill=False).compile_prefill is False


def test_the_engine_compiles_its_prefill_layers_from_its_split_when_asked():
    m = model("qwen2_5_omni", "sdpa")
    assert Generator(m).module not in COMPILED_LAYERS  # not by default on a CPU
    generator = Generator(m, compile_prefill=True, split_unpruned_at=3)
    try:
        layers = COMPILED_LAYERS[generator.module]
        assert layers.start == 3 and layers.layers == list(resolve_family(m).layers(generator.module))[3:]
    finally:
        Generator(m)  # the module's latest engine decides: no compiled layers
    assert generator.module not in COMPILED_LAYERS
