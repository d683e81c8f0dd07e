"""Sharing layers < K between the token presses at one K (``share_layers_below``): the same tokens and
logits as without it for every token press, the first layers run once per prompt and not again, and
nothing shared where it would not be exact (another K, other inputs, a cache press below K)."""

from __future__ import annotations

import pytest
import torch

from kvprune import ComposedPress, DARTPress, FastVPress, FramePress, Generator, KNormPress, RandomPress
from kvprune.generation.layer_reuse import LayerReuse, share_layers_below, shared_layers
from kvprune.generation.prefill import run_prefill
from tests.support.helpers import NO_STOP, model
from tests.support.tiny_models import FAMILIES

ROWS = [[("text", 3), ("audio", 12), ("text", 4)], [("text", 6), ("audio", 8), ("text", 2)]]
K = 2
# every token press, as a sweep runs them: each at several ratios, all at the same K
PRESSES = [press(layer=K, ratio=ratio) for press in (FastVPress, RandomPress, FramePress, DARTPress) for ratio in (0.3, 0.7)]


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen2_audio", "voxtral"])
def test_every_token_press_at_one_k_gives_the_tokens_and_logits_it_gives_alone(family):
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    entry = FAMILIES[family].family.entry(m)
    alone = [run_prefill(entry, inputs, press) for press in PRESSES]
    generator = Generator(m)
    tokens = [generator.generate(inputs, max_new_tokens=6, press=press, **NO_STOP).new_tokens for press in PRESSES]
    reuse = LayerReuse()
    for press, expected, expected_tokens in zip(PRESSES, alone, tokens):
        with share_layers_below(m, press, reuse):
            shared = run_prefill(entry, inputs, press)
            generated = generator.generate(inputs, max_new_tokens=6, press=press, **NO_STOP).new_tokens
        assert torch.equal(shared.logits, expected.logits), press
        assert all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values) and torch.equal(a.valid, b.valid)
                   for a, b in zip(shared.layers, expected.layers)), press
        assert [s.kept_tokens for s in shared.outcome.stats] == [s.kept_tokens for s in expected.outcome.stats]
        assert torch.equal(generated, expected_tokens), press
    # fastv records the attention row; random, frame and dart replay it; the run that missed ran K layers
    assert (reuse.misses, reuse.hits, reuse.layer_forwards) == (1, 2 * len(PRESSES) - 1, K)


def test_other_inputs_another_k_or_a_cache_press_below_k_share_nothing():
    m, inputs = model("qwen2_5_omni", "sdpa"), FAMILIES["qwen2_5_omni"].inputs(ROWS)
    other = FAMILIES["qwen2_5_omni"].inputs(ROWS[::-1])
    entry = FAMILIES["qwen2_5_omni"].family.entry(m)
    reuse = LayerReuse()
    for press, batch in ((FramePress(layer=2, ratio=0.5), inputs), (FramePress(layer=2, ratio=0.5), other),
                         (FramePress(layer=3, ratio=0.5), inputs)):
        with share_layers_below(m, press, reuse):
            run_prefill(entry, batch, press)
    assert (reuse.hits, reuse.misses, reuse.layer_forwards) == (0, 3, 2 + 2 + 3)
    assert shared_layers(None) is None and shared_layers(KNormPress(ratio=0.5)) is None
    assert shared_layers(ComposedPress([FramePress(layer=3, ratio=0.5), KNormPress(layer=1, ratio=0.3)])) is None
    assert shared_layers(ComposedPress([FramePress(layer=2, ratio=0.5), KNormPress(layer=2, ratio=0.3)])) == 2


def test_a_full_memory_keeps_what_it_has_and_runs_the_rest():
    m, inputs = model("qwen2_5_omni", "sdpa"), FAMILIES["qwen2_5_omni"].inputs(ROWS)
    entry = FAMILIES["qwen2_5_omni"].family.entry(m)
    reuse = LayerReuse(max_bytes=0)
    for _ in range(2):
        with share_layers_below(m, FramePress(layer=K, ratio=0.5), reuse):
            run_prefill(entry, inputs, FramePress(layer=K, ratio=0.5))
    assert (reuse.hits, reuse.misses, reuse.held_bytes) == (0, 2, 0)
    layers = FAMILIES["qwen2_5_omni"].family.layers(m)
    assert all("forward" not in layer.__dict__ for layer in layers), "the layers are stock again after the block"


def test_sharing_leaves_the_compiled_decode_step_alone():
    """The layers are replaced only while a prefill runs: the compiled step compiles once, whether the
    prefills before it shared or not (no recompilation from the layers' forward coming and going)."""
    from kvprune.generation.timing import compile_counters

    m, inputs = model("qwen2_5_omni", "sdpa"), FAMILIES["qwen2_5_omni"].inputs(ROWS[:1])
    generator, reuse = Generator(m, compile=True), LayerReuse()
    before = compile_counters()
    for share in (False, True):
        for press in PRESSES[:3]:
            with share_layers_below(m, press, reuse) if share else torch.no_grad():
                generator.generate(inputs, max_new_tokens=3, press=press, **NO_STOP)
    graphs, recompiles = compile_counters()
    assert reuse.hits == 2 and recompiles == before[1] and graphs - before[0] <= 2
