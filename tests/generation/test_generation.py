"""kvprune's generation engine against model.generate: the same greedy tokens under the same press,
on every family's tiny model (CPU, float32), for token, cache, composed and head-wise presses."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kvprune import (
    AdaKVPress, ComposedPress, DARTPress, FastVPress, FramePress, Generator, KNormPress, SnapKVPress, generate, get_press,
    load_model,
)
from kvprune.generation import ENGINE, FALLBACK, bucket_length
from kvprune.generation import generator as generator_module
from kvprune.generation.attention import decode_attention
from kvprune.generation.decode_attention import fused_kernels_run
from kvprune.generation.kept_states import FUSED_ROOM, ROOM
from kvprune.generation.step import Sampling, Stopping, choose
from kvprune.harness.demo import DEMO_MODEL_DIR
from tests.support.helpers import GREEDY, NO_STOP, model
from tests.support.tiny_models import FAMILIES

ROWS = [[("text", 3), ("audio", 12), ("text", 4)], [("text", 6), ("audio", 8), ("text", 2)]]
NEW = 8
PRESSES = {
    "none": None,
    "fastv": FastVPress(layer=2, ratio=0.5),
    "dart": DARTPress(layer=2, ratio=0.6),
    "frame+knorm": ComposedPress([FramePress(ratio=0.5), KNormPress(ratio=0.3)]),
    "snapkv": SnapKVPress(ratio=0.6, window=4),
    "adakv": AdaKVPress(ratio=0.5),
}


def stock_tokens(family: str, m, inputs: dict, press, **kwargs) -> torch.Tensor:
    entry = FAMILIES[family].family.entry(m)
    with torch.no_grad(), press(m) if press is not None else torch.no_grad():
        out = entry.generate(**inputs, max_new_tokens=NEW, **{**GREEDY, **kwargs})
    return out[:, inputs["input_ids"].shape[1] :]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("press_name", list(PRESSES))
def test_greedy_tokens_equal_generate_under_the_same_press(family, press_name):
    m, inputs, press = model(family, "sdpa"), FAMILIES[family].inputs(ROWS), PRESSES[press_name]
    out = Generator(m).generate(inputs, max_new_tokens=NEW, press=press, **NO_STOP)
    assert out.engine == (FALLBACK if family == "gemma3n" else ENGINE)
    assert torch.equal(out.new_tokens, stock_tokens(family, m, inputs, press))
    assert torch.equal(out.sequences[:, : inputs["input_ids"].shape[1]], inputs["input_ids"])


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gemma3n"])
@pytest.mark.parametrize("press_name", ["none", "fastv", "snapkv"])
def test_a_batch_without_padding_decodes_as_generate(family, press_name):
    """Without padding the prefill is called without its attention mask (``prefill_call``): the same tokens."""
    m, inputs, press = model(family, "sdpa"), FAMILIES[family].inputs(ROWS[:1]), PRESSES[press_name]
    assert bool(inputs["attention_mask"].all())
    out = Generator(m).generate(inputs, max_new_tokens=NEW, press=press, **NO_STOP)
    assert torch.equal(out.new_tokens, stock_tokens(family, m, inputs, press))


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gemma3n"])
def test_eager_attention_decodes_as_generate(family):
    m, inputs, press = model(family, "eager"), FAMILIES[family].inputs(ROWS), PRESSES["fastv"]
    out = generate(m, inputs, max_new_tokens=NEW, press=press, **NO_STOP)
    assert torch.equal(out.new_tokens, stock_tokens(family, m, inputs, press))


@pytest.mark.parametrize("family", ["qwen2_5_omni", "voxtral"])
def test_ratio_zero_is_bit_identical_to_no_press(family):
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    generator = Generator(m)
    plain = generator.generate(inputs, max_new_tokens=NEW, **NO_STOP)
    for press in (FastVPress(layer=2), SnapKVPress(window=4)):
        pressed = generator.generate(inputs, max_new_tokens=NEW, press=press, ratio=0.0, **NO_STOP)
        assert torch.equal(pressed.new_tokens, plain.new_tokens)
        assert pressed.outcome.stats == [s for s in pressed.outcome.stats if s.kept_tokens == s.audio_tokens]


@pytest.mark.parametrize("press_name", ["none", "fastv", "frame+knorm", "adakv"])
@pytest.mark.parametrize("order", [[0, 1], [1, 0]])
def test_prefilled_apart_decoded_together_equals_each_alone(press_name, order):
    """Rows prefilled in separate batches decode together as each would alone, whichever batch holds
    more entries (the second, longer one makes the decode state grow)."""
    family = "qwen2_5_omni"
    m, press = model(family, "sdpa"), PRESSES[press_name]
    batches = [FAMILIES[family].inputs([ROWS[i]]) for i in order]
    generator = Generator(m)
    together = generator.generate(batches, max_new_tokens=NEW, press=press, **NO_STOP)
    alone = torch.cat([generator.generate(b, max_new_tokens=NEW, press=press, **NO_STOP).new_tokens for b in batches])
    assert torch.equal(together.new_tokens, alone)
    assert len(together.outcome) == 2


def test_a_call_sizes_its_state_for_its_longest_prompt():
    """Prompts prefilled apart in ascending length decode in one state sized for the longest (not grown
    through a state per bucket, each a new allocation and graph capture), as each would alone."""
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    prompts = [FAMILIES[family].inputs([[("text", 3), ("audio", n), ("text", 2)]]) for n in (8, 60, 150)]
    for press in (None, PRESSES["fastv"]):
        generator = Generator(m)
        together = generator.generate(prompts, max_new_tokens=NEW, press=press, **NO_STOP)
        assert generator.states == 1
        alone = torch.cat([Generator(m).generate(p, max_new_tokens=NEW, press=press, **NO_STOP).new_tokens for p in prompts])
        assert torch.equal(together.new_tokens, alone)


def test_a_shorter_prompt_decodes_in_a_kept_state_that_holds_it_within_an_octave():
    """With ``state_room=2`` a prompt a little shorter than one decoded before (a task's after another's) reuses that
    call's state, and so its CUDA graph on a GPU, instead of allocating its own of a smaller bucket; one more than an
    octave shorter gets its own. Tokens are those of the prompt alone on a fresh engine (here, on the CPU's attention,
    exactly). By default on the CPU (the matmul attention, whose sums run over the buffer) each shape has its own
    state: a call's numbers never depend on the calls before it."""
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    long, shorter, short = (FAMILIES[family].inputs([[("text", 3), ("audio", n), ("text", 2)]]) for n in (150, 120, 8))
    for press in (None, PRESSES["fastv"]):
        generator = Generator(m, state_room=2)
        calls = [generator.generate(p, max_new_tokens=NEW, press=press, **NO_STOP) for p in (long, shorter, short)]
        assert [c.new_state for c in calls] == [True, False, True] and generator.states == 2
        for call, prompt in zip(calls, (long, shorter, short)):
            assert torch.equal(call.new_tokens, Generator(m).generate(prompt, max_new_tokens=NEW, press=press, **NO_STOP).new_tokens)
        exact = Generator(m)
        assert exact.state_room == ROOM == 1
        assert [exact.generate(p, max_new_tokens=NEW, press=press, **NO_STOP).new_state for p in (long, shorter)] == [True, True]
    with pytest.raises(ValueError, match="state_room must be at least 1"):
        Generator(m, state_room=0.5)


def test_the_default_room_is_twice_where_the_fused_decode_attention_runs(monkeypatch):
    """The fused kernels split each row by its own length (``test_decode_attention``: the same bits in any buffer), so
    there a call may decode in a state of up to twice its room; on the matmul path only in its own."""
    m = model("qwen2_5_omni", "sdpa")
    assert not fused_kernels_run(torch.device("cpu")) and not fused_kernels_run(torch.device("cuda"), fused=False)
    assert not fused_kernels_run(torch.device("cuda"), dtype=torch.float64)  # a dtype the kernels do not take
    monkeypatch.setattr(generator_module, "fused_kernels_run", lambda device, fused, dtype: fused and dtype != torch.float64)
    assert Generator(m).state_room == FUSED_ROOM == 2 and Generator(m, fused_attention=False).state_room == ROOM
    assert Generator(m.to(torch.float64)).state_room == ROOM
    assert Generator(m, state_room=1.5).state_room == 1.5


def test_a_kept_state_a_batch_grows_into_starts_clean():
    """When a later batch keeps more entries than the first one's proportion foresaw, its rows move into a
    larger state; a larger state kept from an earlier call (its step and rows advanced) is cleared first,
    so a repeated call decodes alike."""
    family = "qwen2_5_omni"
    m, press = model(family, "sdpa"), PRESSES["fastv"]
    # mostly audio, then mostly text: pruning halves the first's audio, the second keeps its text
    first, second = (FAMILIES[family].inputs([[("text", t), ("audio", a), ("text", 2)]]) for t, a in ((3, 160), (160, 4)))
    generator = Generator(m)
    alone = torch.cat([generator.generate(b, max_new_tokens=NEW, press=press, **NO_STOP).new_tokens for b in (first, second)])
    states = generator.states
    for _ in range(2):  # the second call grows into the state the first one left behind
        together = generator.generate([first, second], max_new_tokens=NEW, press=press, **NO_STOP)
        assert torch.equal(together.new_tokens, alone)
    assert generator.states == states + 2  # two rows: the first's state, and the one it grew into


def test_a_graph_capture_is_timed_apart_from_the_token_loop(monkeypatch):
    """Capturing (and compiling) the decode step for a new state happens once, before the loop: its time is
    ``capture_s``, not part of ``decode_s`` (which prices every later token). A fake clock makes it exact."""
    import kvprune.generation.timing as timing_module
    from kvprune.generation.graphs import StepRunner

    now = [0.0]

    def tick() -> float:
        now[0] += 1.0  # every reading of the clock: one second
        return now[0]

    monkeypatch.setattr(timing_module.time, "perf_counter", tick)
    monkeypatch.setattr(StepRunner, "prepare", lambda runner, state: now.__setitem__(0, now[0] + 1000.0))  # a capture
    family = "qwen2_audio"
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    out = Generator(m).generate(inputs, max_new_tokens=NEW, **NO_STOP)
    assert 1000.0 <= out.capture_s < 1002.0 and out.timing.decode_s < 1000.0


def test_end_of_sequence_stops_rows_as_generate_does():
    family = "qwen2_audio"
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    free = Generator(m).generate(inputs, max_new_tokens=NEW, **NO_STOP).new_tokens
    eos = int(free[0, 2])  # a token row 0 emits third: rows end there, or run on and are padded
    suppress = [t for t in GREEDY["suppress_tokens"] if t != eos]
    ours = Generator(m).generate(inputs, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=GREEDY["pad_token_id"],
                                 suppress_tokens=suppress)
    theirs = stock_tokens(family, m, inputs, None, eos_token_id=eos, suppress_tokens=suppress)
    assert torch.equal(ours.new_tokens, theirs)
    assert ours.new_tokens.shape[1] <= NEW


def test_a_short_answer_stops_decoding_at_the_first_read_after_it_ends(monkeypatch):
    from kvprune.generation.graphs import StepRunner

    family = "qwen2_audio"
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS[:1])
    generator, longest = Generator(m), 12  # reads after steps 1, 2, 4 and 8 come before the longest
    free = generator.generate(inputs, max_new_tokens=longest, **NO_STOP).new_tokens
    steps, run = [], StepRunner.run
    monkeypatch.setattr(StepRunner, "run", lambda self, state: (steps.append(1), run(self, state)))
    for ends_at in (2, 3, 6):  # the answer's tokens, its end included
        eos = int(free[0, ends_at - 1])
        if eos in free[0, : ends_at - 1].tolist():
            continue  # the row would end earlier
        steps.clear()
        out = generator.generate(inputs, max_new_tokens=longest, eos_token_id=eos, pad_token_id=GREEDY["pad_token_id"],
                                 suppress_tokens=[t for t in GREEDY["suppress_tokens"] if t != eos])
        first_read = min(step for step in range(ends_at - 1, longest) if generator.reads_stops_after(step))
        assert len(steps) == first_read and 1 + first_read == generator.tokens_generated(ends_at, longest)
        assert torch.equal(out.new_tokens[:, :ends_at], free[:, :ends_at]) and out.timing.new_tokens == ends_at
    assert [step for step in range(1, 40) if generator.reads_stops_after(step)] == [1, 2, 4, 8, 16, 32]


def test_one_new_token_comes_from_the_prefill():
    family = "voxtral"
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    generator = Generator(m)
    one = generator.generate(inputs, max_new_tokens=1, press=PRESSES["fastv"], **NO_STOP)
    many = generator.generate(inputs, max_new_tokens=NEW, press=PRESSES["fastv"], **NO_STOP)
    assert torch.equal(one.new_tokens, many.new_tokens[:, :1])
    assert one.timing.decode_tokens_per_s is None


def test_decode_states_are_kept_across_calls_within_their_memory_budget():
    family = "qwen2_5_omni"
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    generator = Generator(m, split_unpruned_at=None)
    for _ in range(2):
        generator.generate(inputs, max_new_tokens=NEW, press=PRESSES["fastv"], **NO_STOP)
    assert generator.states == 1  # the same shape: the same buffers, refilled
    generator.generate(inputs, max_new_tokens=NEW, **NO_STOP)  # unpruned, in one group: another grouping of layers
    assert generator.states == 2
    tight = Generator(m, max_state_bytes=1, split_unpruned_at=None)
    for press in (None, PRESSES["fastv"]):
        tight.generate(inputs, max_new_tokens=NEW, press=press, **NO_STOP)
    assert tight.states == 1  # the least recently used went; the one in use always stays


def test_a_call_says_whether_it_allocated_its_state_and_forgotten_states_are_made_again():
    m, inputs = model("qwen2_5_omni", "sdpa"), FAMILIES["qwen2_5_omni"].inputs(ROWS)
    generator = Generator(m)
    assert generator.max_state_bytes == 8 << 30  # "auto" off CUDA
    calls = [generator.generate(inputs, max_new_tokens=NEW, **NO_STOP) for _ in range(2)]
    assert [c.new_state for c in calls] == [True, False]
    generator.forget_states()
    assert generator.states == 0 and generator.state_bytes == 0
    again = generator.generate(inputs, max_new_tokens=NEW, **NO_STOP)
    assert again.new_state and torch.equal(again.new_tokens, calls[0].new_tokens)


def test_running_out_of_memory_drops_the_kept_states_and_runs_again_once(monkeypatch):
    import kvprune.generation.generator as engine

    m, inputs = model("qwen2_5_omni", "sdpa"), FAMILIES["qwen2_5_omni"].inputs(ROWS)
    generator = Generator(m, split_unpruned_at=None)  # unpruned in a grouping of its own: a state of its own
    pruned = generator.generate(inputs, max_new_tokens=NEW, press=PRESSES["fastv"], **NO_STOP)  # keeps a state
    expected = Generator(m).generate(inputs, max_new_tokens=NEW, **NO_STOP).new_tokens
    made, failures = engine.DecodeState, []

    def short_of_memory(shape, template):  # the next allocation fails, wrapped as the compiler wraps it
        if not failures:
            failures.append(shape)
            try:
                raise torch.OutOfMemoryError("CUDA out of memory")
            except torch.OutOfMemoryError as error:
                raise RuntimeError("compiling the step failed") from error
        return made(shape, template)

    monkeypatch.setattr(engine, "DecodeState", short_of_memory)
    out = generator.generate(inputs, max_new_tokens=NEW, **NO_STOP)
    assert failures and torch.equal(out.new_tokens, expected)
    assert generator.states == 1  # the pruned call's state gave way; only this call's is kept
    assert pruned.new_state
    failures.clear()
    generator.forget_states()  # nothing kept to give way: the error is the caller's
    with pytest.raises(RuntimeError, match="compiling the step failed"):
        generator.generate(inputs, max_new_tokens=NEW, **NO_STOP)


def test_models_the_engine_cannot_decode_fall_back_to_generate_and_say_why():
    generator = Generator(model("gemma3n", "sdpa"))
    out = generator.generate(FAMILIES["gemma3n"].inputs(ROWS), max_new_tokens=2, **NO_STOP)
    assert out.engine == FALLBACK and "reuse earlier layers' caches" in out.note
    m = model("qwen2_audio", "sdpa")
    config = FAMILIES["qwen2_audio"].family.decoder(m).config
    config._attn_implementation = "flash_attention_2"
    try:
        assert "'sdpa' or 'eager' only" in Generator(m).unsupported
    finally:
        config._attn_implementation = "sdpa"


def test_bad_requests_are_refused():
    m, inputs = model("qwen2_audio", "sdpa"), FAMILIES["qwen2_audio"].inputs(ROWS)
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        generate(m, inputs, max_new_tokens=0)
    with pytest.raises(ValueError, match="empty list"):
        generate(m, [], max_new_tokens=2)
    with pytest.raises(ValueError, match="temperature"):
        generate(m, inputs, max_new_tokens=2, do_sample=True, temperature=0)
    with pytest.raises(ValueError, match="cuda_graphs=True"):
        Generator(m, cuda_graphs=True)


def test_a_press_may_be_named_and_other_mistakes_say_what_to_give():
    m, inputs = model("qwen2_audio", "sdpa"), FAMILIES["qwen2_audio"].inputs(ROWS)
    named = generate(m, inputs, max_new_tokens=NEW, press="fastv", ratio=0.5, **NO_STOP)
    built = generate(m, inputs, max_new_tokens=NEW, press=get_press("fastv"), ratio=0.5, **NO_STOP)
    assert torch.equal(named.new_tokens, built.new_tokens) and named.outcome.stats == built.outcome.stats
    assert named.outcome.stats[0].kept_tokens < named.outcome.stats[0].audio_tokens, "the ratio applies to a named press"
    with pytest.raises(ValueError, match=r"press='nosuchpress' is not a registered press: give one of fastv, .*FastVPress"):
        generate(m, inputs, max_new_tokens=2, press="nosuchpress", ratio=0.5)
    with pytest.raises(TypeError, match="press must be a Press .* not type"):
        generate(m, inputs, max_new_tokens=2, press=FastVPress, ratio=0.5)  # the class, not a press
    wave = np.zeros(16_000, dtype=np.float32)
    for raw in (wave, [wave]):
        with pytest.raises(TypeError, match=r"inputs must be the model inputs of a prompt .* not ndarray: a waveform goes "
                                            r"into loaded.build_inputs\(\[wave\], prompt\) first"):
            generate(m, raw, max_new_tokens=2)


def test_a_loaded_model_is_taken_for_its_model():
    loaded = load_model(DEMO_MODEL_DIR, device="cpu")
    inputs = loaded.build_inputs([0.1 * np.sin(np.arange(16_000, dtype=np.float32) / 10)], "What is heard?")
    whole = generate(loaded, inputs, max_new_tokens=4, press="frame", ratio=0.5)
    assert torch.equal(whole.new_tokens, generate(loaded.model, inputs, max_new_tokens=4, press="frame", ratio=0.5).new_tokens)
    assert Generator(loaded).model is loaded.model


@pytest.mark.parametrize("n", [1, 63, 64, 65, 100, 832, 864, 7606, 100_000])
def test_buckets_bound_the_padding(n):
    length = bucket_length(n)
    assert length >= n and length == bucket_length(length)
    assert length == 64 if n <= 64 else length <= n * (1 + 1 / 8)


@pytest.mark.parametrize("per_head", [False, True])
def test_decode_attention_equals_scaled_dot_product_attention(per_head):
    generator = torch.Generator().manual_seed(0)
    batch, heads, kv_heads, length, dim = 2, 6, 2, 11, 8
    query = torch.randn(batch, heads, 1, dim, generator=generator)
    key, value = (torch.randn(batch, kv_heads, length, dim, generator=generator) for _ in range(2))
    mask = torch.rand(batch, heads if per_head else 1, 1, length, generator=generator) > 0.4
    mask[..., 0] = True
    expected = F.scaled_dot_product_attention(
        query, key.repeat_interleave(heads // kv_heads, 1), value.repeat_interleave(heads // kv_heads, 1), attn_mask=mask
    ).transpose(1, 2)
    torch.testing.assert_close(decode_attention(query, key, value, mask), expected)


def _stopping(vocab: int, suppressed=()) -> Stopping:
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[list(suppressed)] = True
    return Stopping(eos=torch.zeros(0, dtype=torch.long), pad=torch.tensor(0), suppressed=mask)


def test_sampling_draws_each_token_with_its_probability():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    logits = probs.log().expand(40_000, -1)
    torch.manual_seed(0)
    draws = choose(logits, Sampling(do_sample=True), _stopping(4))
    frequencies = torch.bincount(draws, minlength=4).float() / len(draws)
    assert torch.allclose(frequencies, probs, atol=0.01)


def test_top_k_top_p_and_suppression_restrict_the_draws():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]]).expand(5_000, -1)
    torch.manual_seed(0)
    assert set(choose(logits, Sampling(do_sample=True, top_k=2), _stopping(5)).tolist()) == {0, 1}
    # softmax: 0.64, 0.24, 0.09, ...: top_p=0.8 keeps the two whose preceding mass is below 0.8
    assert set(choose(logits, Sampling(do_sample=True, top_p=0.8), _stopping(5)).tolist()) == {0, 1}
    assert set(choose(logits, Sampling(do_sample=True, top_k=2), _stopping(5, [0])).tolist()) == {1, 2}
    assert set(choose(logits, Sampling(), _stopping(5, [0])).tolist()) == {1}


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="Inductor on a CPU needs a C compiler")
@pytest.mark.parametrize("split_unpruned_at, groupings", [(None, 2), (PRESSES["fastv"].layer, 1)])
def test_a_compiled_step_compiles_once_per_grouping_over_many_lengths(split_unpruned_at, groupings):
    """Bounded compilation: cache lengths are dynamic from the first compilation (never once static, then
    again dynamic), and lengths that differ between groups of layers stay apart; the tokens are eager's. The
    unpruned prompts laid out in one group are a grouping of their own; split at FastV's K (the default for
    FastV's default K), they decode on FastV's compiled step."""
    from kvprune.generation.timing import compile_counters

    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    prompts = [FAMILIES[family].inputs([[("text", 3), ("audio", n), ("text", 2)]]) for n in (8, 70, 150)]
    compiled = Generator(m, compile=True, split_unpruned_at=split_unpruned_at)
    eager = Generator(m, compile=False, split_unpruned_at=None)
    graphs_before, recompiles_before = compile_counters()
    for press in (None, PRESSES["fastv"]):  # one group of layers (or two alike), then layers < K and >= K
        for inputs in prompts:
            out = compiled.generate(inputs, max_new_tokens=NEW, press=press, **NO_STOP)
            assert torch.equal(out.new_tokens, eager.generate(inputs, max_new_tokens=NEW, press=press, **NO_STOP).new_tokens)
    graphs, recompiles = compile_counters()
    assert compiled.fallbacks == {}
    assert (graphs - graphs_before, recompiles - recompiles_before) == (groupings, 0)


def test_the_unpruned_split_is_where_most_token_presses_drop_tokens():
    from kvprune import DARTPress
    from kvprune.generation import unpruned_split
    from kvprune.press import TOKEN_LAYER

    assert unpruned_split([None, FastVPress(layer=3), FramePress(layer=3), DARTPress(layer=5)]) == 3
    assert unpruned_split([ComposedPress([FramePress(layer=4), KNormPress()])]) == 4  # a composition's token part
    assert unpruned_split([KNormPress(), None]) == unpruned_split([]) == TOKEN_LAYER == FastVPress().layer


def test_unpruned_prompts_split_in_two_groups_decode_as_in_one():
    """Two groups of the same entries mask every layer alike: the same tokens and the same logits' choices."""
    family = "qwen2_5_omni"
    m = model(family, "sdpa")
    inputs = FAMILIES[family].inputs([[("text", 3), ("audio", 40 + row), ("text", 2)] for row in range(3)])
    one, two = (Generator(m, split_unpruned_at=split).generate(inputs, max_new_tokens=NEW, **NO_STOP) for split in (None, 2))
    assert torch.equal(one.new_tokens, two.new_tokens)


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="Inductor on a CPU needs a C compiler")
def test_a_compiled_step_writes_the_cache_in_place_and_copies_none_of_it():
    """The new column goes into the cache where it lies, and attention reads it there: no buffer of a
    cache's size (its dynamic length) is allocated by the compiled step (a ``scatter_`` in the step made
    the compiler copy every layer's cache per token)."""
    import re

    from torch._inductor.utils import run_and_get_code

    family = "qwen2_5_omni"
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    generator = Generator(m, compile=True)
    out, sources = run_and_get_code(lambda: generator.generate(inputs, max_new_tokens=NEW, press=PRESSES["fastv"], **NO_STOP))
    assert torch.equal(out.new_tokens, stock_tokens(family, m, inputs, PRESSES["fastv"]))
    code = "\n".join(sources)
    cache_sized = re.findall(r"empty_strided\w*\(\((\d+), (\d+), (s\d+), (\d+)\)", code)
    assert cache_sized == []
    assert "kvprune.write_column" in code


def test_a_step_that_cannot_compile_runs_uncompiled_and_says_so(monkeypatch):
    """Never a silent fallback: a compiler failure is recorded, and the step decodes as written."""
    from kvprune.generation import graphs

    monkeypatch.setattr(graphs.torch, "compile", lambda function, **kwargs: _raise_from_dynamo)
    m, inputs = model("qwen2_audio", "sdpa"), FAMILIES["qwen2_audio"].inputs(ROWS)
    generator = Generator(m, compile=True)
    out = generator.generate(inputs, max_new_tokens=NEW, **NO_STOP)
    assert torch.equal(out.new_tokens, stock_tokens("qwen2_audio", m, inputs, None))
    assert any(reason.startswith("compile failed, decoding uncompiled") for reason in generator.fallbacks)


def test_a_grouping_that_cannot_compile_decodes_uncompiled_while_others_stay_compiled(monkeypatch):
    """torch 2.11 fails now and then to build a guard for one grouping of layers: that grouping decodes as
    written, said per call (``step_compiled``) and in ``fallbacks``; the unpruned grouping keeps its compiled step."""
    from kvprune.generation import graphs

    def fake_compile(step, **kwargs):  # "compiles" one group of layers, fails on two (layers < K and >= K)
        return lambda state: _raise_from_dynamo(state) if len(state.masks) > 1 else step(state)

    monkeypatch.setattr(graphs.torch, "compile", fake_compile)
    family = "qwen2_5_omni"
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROWS)
    generator = Generator(m, compile=True, split_unpruned_at=None)  # unpruned in one group
    calls = [(press, generator.generate(inputs, max_new_tokens=NEW, press=PRESSES[press], **NO_STOP)) for press in ("none", "fastv", "none", "fastv")]
    assert [out.step_compiled for _, out in calls] == [True, False, True, False]
    for press, out in calls:
        assert torch.equal(out.new_tokens, stock_tokens(family, m, inputs, PRESSES[press]))
    assert list(generator.fallbacks.values()) == [1]  # one failed compilation, not one per call
    assert "layers in 2 group(s)" in next(iter(generator.fallbacks))


def _raise_from_dynamo(state):
    """A stand-in for a compiled step whose compilation fails inside torch._dynamo."""
    import torch._dynamo.eval_frame as eval_frame

    code = compile("raise RuntimeError('sources must not be empty for symbol s31')", eval_frame.__file__, "exec")
    exec(code, {})


def test_a_model_whose_attention_drops_the_engine_s_arguments_is_stopped_with_the_fix(monkeypatch):
    """Each layer's new key and value wait in the decode cache for kvprune's attention to write them: a step after
    which any still waits (an attention module that did not hand kvprune's keyword arguments down) stops with the
    layers it names and the way out, rather than decoding over a cache without its new tokens."""
    from kvprune.generation import attention

    monkeypatch.setattr(attention, "_new_entries", lambda module, kwargs: (None, None))  # nothing taken, nothing written
    m = model("qwen2_5_omni", "sdpa")
    inputs = FAMILIES["qwen2_5_omni"].inputs([[("text", 3), ("audio", 8), ("text", 2)]])
    with pytest.raises(RuntimeError, match=r"decoder layers \[0, 1.*generate's own loop"):
        Generator(m, compile=False).generate(inputs, max_new_tokens=3, **NO_STOP)
