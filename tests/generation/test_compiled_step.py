"""What torch.compile sees of the decode step: only bucket lengths are dynamic, over every grouping of layers the
engine builds, so that every guard of the compiled step can be built on the GPU as on the CPU.

On CUDA, Inductor guards that every buffer a kernel indexes fits 32-bit indexing; torch 2.11 failed to build
that guard (``IndexError`` in ``issue_guard``) once a second grouping of layers (one group, then layers < K and
>= K) met the compiled step, and every token press then decoded uncompiled in batches. The CPU backend builds
no such guard, so the backend here builds it on every input (as Inductor's GPU path does), and records every
symbol Dynamo made with the inputs it came from. The old step made the grouping itself dynamic: the size of the
one (groups, B) columns tensor, each layer's view of it (an input whose base has a size of its own), and the
layer-to-group numbers that chose each layer's mask.
"""

from __future__ import annotations

import re

import pytest
import torch

from kvprune import AdaKVPress, ComposedPress, FastVPress, FramePress, Generator, KNormPress, PyramidKVPress
from tests.support.helpers import NO_STOP, model
from tests.support.tiny_models import FAMILIES

INT32_MAX = torch.iinfo(torch.int32).max
# the dimensions a decode state marks dynamic (bucket lengths), and the pad token (a 0-d tensor Dynamo reads as a number)
BUCKET_LENGTH = re.compile(
    r"L\['state'\]\.(cache\.layers\[\d+\]\.(keys|values)\.size\(\)\[2\]|masks\[\d+\]\.size\(\)\[3\]|out\.size\(\)\[1\])"
    r"|L\['stopping'\]\.pad\.item\(\)"
)
GROUPINGS = {  # one grouping of layers each: one group, two groups, a group per compressed layer, head-wise masks, both
    "none": None,
    "fastv": FastVPress(layer=2, ratio=0.5),
    "pyramidkv": PyramidKVPress(ratio=0.5),
    "adakv": AdaKVPress(ratio=0.5),
    "frame+knorm": ComposedPress([FramePress(ratio=0.5), KNormPress(ratio=0.3)]),
}


def guarding_backend(symbols: dict[str, list[str]]):
    """A torch.compile backend that builds Inductor's 32-bit-indexing guard on every input's storage (as its GPU
    path does for the buffers its kernels index) and records each symbol of the graph with its sources."""

    def backend(graph_module, example_inputs):
        from torch._guards import detect_fake_mode

        for tensor in example_inputs:
            if isinstance(tensor, torch.Tensor):
                storage = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
                bool(storage <= INT32_MAX)  # a guard on every symbol of the storage size
        shape_env = detect_fake_mode(example_inputs).shape_env
        for symbol, sources in shape_env.var_to_sources.items():
            symbols.setdefault(str(symbol), []).extend(source.name for source in sources)
        return graph_module.forward

    return backend


@pytest.mark.usefixtures("one_thread")
def test_a_compiled_step_takes_only_bucket_lengths_as_dynamic_over_every_grouping(monkeypatch):
    from kvprune.generation import graphs

    symbols: dict[str, list[str]] = {}
    compile_ = torch.compile
    monkeypatch.setattr(graphs.torch, "compile", lambda step, mode=None: compile_(step, backend=guarding_backend(symbols)))
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    compiled, eager = Generator(m, compile=True), Generator(m, compile=False)
    for rows in (2, 3):  # a runner per batch size
        for n in (8, 40):
            inputs = FAMILIES[family].inputs([[("text", 3), ("audio", n + row), ("text", 2)] for row in range(rows)])
            for name, press in GROUPINGS.items():
                out = compiled.generate(inputs, max_new_tokens=6, press=press, **NO_STOP)
                assert out.step_compiled, name
                assert torch.equal(out.new_tokens, eager.generate(inputs, max_new_tokens=6, press=press, **NO_STOP).new_tokens)
    assert compiled.fallbacks == {}
    assert symbols, "the backend saw no graph"
    not_lengths = {symbol: sources for symbol, sources in symbols.items() if not all(map(BUCKET_LENGTH.fullmatch, sources))}
    assert not_lengths == {}
    assert all(sources for sources in symbols.values())  # every guard can name the input it reads


def test_a_compiler_failure_is_one_line_in_fallbacks_and_nothing_in_the_terminal(monkeypatch, capfd, caplog):
    """What torch's compiler logs of its own failure (a guard's traceback, dozens of lines) reaches no handler
    while the runner compiles; the runner's one line in ``fallbacks`` says what happened."""
    import logging

    import torch._dynamo.eval_frame as eval_frame

    from kvprune.generation import graphs

    def failing_compile(step, mode=None):
        def compiled(state):
            logging.getLogger("torch._guards").error("Error while creating guard:\n%s", "Name: ''\n" * 40)
            logging.getLogger("torch._dynamo.kvprune_test_child").warning("a child logger made while compiling")
            exec(compile("raise IndexError('list index out of range')", eval_frame.__file__, "exec"), {})

        return compiled

    monkeypatch.setattr(graphs.torch, "compile", failing_compile)
    m, inputs = model("qwen2_audio", "sdpa"), FAMILIES["qwen2_audio"].inputs([[("text", 3), ("audio", 8), ("text", 2)]])
    generator = Generator(m, compile=True)
    with caplog.at_level(logging.DEBUG):
        out = generator.generate(inputs, max_new_tokens=4, **NO_STOP)
    assert not out.step_compiled
    assert [reason.splitlines() for reason in generator.fallbacks] == [[next(iter(generator.fallbacks))]]
    assert "IndexError: list index out of range" in next(iter(generator.fallbacks))
    assert caplog.records == []
    assert "creating guard" not in capfd.readouterr().err
    with caplog.at_level(logging.DEBUG):  # outside the runner's compilation, torch's records reach their handlers
        logging.getLogger("torch._guards").error("after")
    assert [record.getMessage() for record in caplog.records] == ["after"]


@pytest.mark.usefixtures("one_thread")
def test_what_compiles_inside_the_timed_spans_is_said_and_what_compiles_before_the_token_loop_is_not(monkeypatch):
    """``compiled_in_timing``: on the CPU the step compiles in the token loop's first step, inside the decoding
    time; on a GPU a new state's step compiles (and is captured) in ``StepRunner.prepare``, before the loop's
    clock starts, so the call's times do not include it (``timing.compiled`` still says the call compiled)."""
    import torch._dynamo

    from kvprune.generation import graphs

    compile_ = torch.compile
    monkeypatch.setattr(graphs.torch, "compile", lambda step, mode=None: compile_(step, backend="eager"))
    m, inputs = model("qwen2_audio", "sdpa"), FAMILIES["qwen2_audio"].inputs([[("text", 3), ("audio", 8), ("text", 2)]])
    torch._dynamo.reset()
    generator = Generator(m, compile=True)
    first, again = (generator.generate(inputs, max_new_tokens=4, **NO_STOP) for _ in range(2))
    assert first.compilations > 0 and first.timing.compiled and first.compiled_in_timing
    assert again.compilations == 0 and not again.compiled_in_timing

    def warming_prepare(self, state):  # what prepare does on a GPU before its capture: one step, undone
        saved = state.snapshot()
        self.function(state)
        state.restore(saved)

    monkeypatch.setattr(graphs.StepRunner, "prepare", warming_prepare)
    torch._dynamo.reset()
    prepared = Generator(m, compile=True).generate(inputs, max_new_tokens=4, **NO_STOP)
    assert prepared.compilations > 0 and prepared.timing.compiled and not prepared.compiled_in_timing
    assert torch.equal(prepared.new_tokens, first.new_tokens)


@pytest.mark.usefixtures("one_thread")
def test_a_smaller_batch_decodes_on_the_full_batches_compiled_step_with_its_other_rows_idle(monkeypatch):
    """A sweep's last batch of a task has fewer rows than the others: with ``decode_rows`` it decodes in a state of
    the full batch's rows (the rest idle, ended from the start), on their compiled step (a batch size is a
    compilation of its own), with the tokens it gets alone. Uncompiled, idle rows would only cost: none are made."""
    import torch._dynamo

    from kvprune.generation import graphs

    compile_ = torch.compile
    monkeypatch.setattr(graphs.torch, "compile", lambda step, mode=None: compile_(step, backend="eager"))
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    prompts = [FAMILIES[family].inputs([[("text", 3), ("audio", 30 + 7 * row), ("text", 2)]]) for row in range(4)]
    alone = Generator(m, compile=False)
    torch._dynamo.reset()
    generator = Generator(m, compile=True)
    full = generator.generate(prompts, max_new_tokens=6, press=GROUPINGS["fastv"], decode_rows=4, **NO_STOP)
    assert full.compilations > 0
    last = generator.generate(prompts[:3], max_new_tokens=6, press=GROUPINGS["fastv"], decode_rows=4, **NO_STOP)
    assert last.compilations == 0 and last.step_compiled and last.new_tokens.shape[0] == 3
    expected = alone.generate(prompts[:3], max_new_tokens=6, press=GROUPINGS["fastv"], **NO_STOP).new_tokens
    assert torch.equal(last.new_tokens, expected)
    own = generator.generate(prompts[:3], max_new_tokens=6, press=GROUPINGS["fastv"], **NO_STOP)
    assert own.compilations > 0 and torch.equal(own.new_tokens, expected), "3 rows of their own: another compilation"
    sized = [alone.generate(prompts[:3], max_new_tokens=6, decode_rows=rows, **NO_STOP).timing.kv_cache_bytes
             for rows in (None, 4)]
    assert sized[0] == sized[1], "uncompiled: no idle rows"
    with pytest.raises(ValueError, match="decode_rows=-1 is invalid"):
        alone.generate(prompts[:1], max_new_tokens=2, decode_rows=-1, **NO_STOP)


@pytest.mark.parametrize("split, recompiles", [(True, False), (False, True)])
def test_the_compilation_timing_script_compiles_the_press_s_call_again_only_without_the_split(monkeypatch, split,
                                                                                                recompiles):
    """``scripts/time_decode_compilation.py``'s child process, in this one with the eager backend (Inductor takes
    minutes on these CPUs): with the unpruned caches split at K the FastV call reuses the unpruned call's compiled
    step; in one group it compiles a step of its own. Both give the uncompiled engine's tokens."""
    import argparse

    import torch._dynamo

    from kvprune.generation import graphs
    from tests.support.paths import load_script

    compile_ = torch.compile
    monkeypatch.setattr(graphs.torch, "compile", lambda step, mode=None: compile_(step, backend="eager"))
    torch._dynamo.reset()
    script = load_script("time_decode_compilation")
    args = argparse.Namespace(preset="tiny-aero", layers=4, layer=2, seconds=1.0, new_tokens=3, device="cpu", threads=1,
                              split=split)
    calls = script._child(args)
    unpruned, fastv = calls["unpruned"], calls["fastv 0.5"]
    assert unpruned["compilations"] > 0 and (fastv["compilations"] > 0) is recompiles
    assert unpruned["same_tokens"] and fastv["same_tokens"]


@pytest.mark.usefixtures("one_thread")
def test_the_step_through_the_linear_pass_runs_each_mlp_as_one_gated_call_and_decodes_the_same_tokens(monkeypatch):
    """``fast_linear`` on the CPU (the operators take ``F.linear`` there): the real model's compiled step, every
    layer's MLP one ``gated_linear`` call and its other projections grouped, decodes what the eager model does."""
    from kvprune.generation import gemv

    calls = {True: 0, False: 0}
    run = gemv._run

    def counting(x, weights, biases, gated, fallback):
        calls[gated] += 1
        return run(x, weights, biases, gated, fallback)

    monkeypatch.setattr(gemv, "_run", counting)
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs([[("text", 3), ("audio", 20), ("text", 2)]])
    press = FastVPress(layer=2, ratio=0.5)
    fast = Generator(m, compile=True, fast_linear=True, cuda_graphs=False).generate(inputs, max_new_tokens=5, press=press,
                                                                                    **NO_STOP)
    eager = Generator(m, compile=False).generate(inputs, max_new_tokens=5, press=press, **NO_STOP)
    layers = m.config.get_text_config().num_hidden_layers
    assert fast.step_compiled and torch.equal(fast.new_tokens, eager.new_tokens)
    assert calls[True] > 0 and calls[True] % layers == 0  # a gated call per layer and step
    assert calls[False] == calls[True] // layers * (3 * layers + 1)  # q/k/v, o and down per layer, the head
