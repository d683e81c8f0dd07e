"""Presses on a model split over devices, checked on the CPU.

A split model (accelerate's ``device_map``) hands a press layer K-1's keys and attention on the
device of layer K-1, the final norm's hidden states on the last device, and each layer's cache on
that layer's device, while the prompt's masks stay on the first. Every press's choice is recorded
from an ordinary CPU run, then replayed with its inputs on virtual CUDA devices
(``virtual_devices``) placed as each split point would place them: any operation that mixes two
devices fails as it would on GPUs, and the choices must be the same as on one device.
``scripts/check_multi_gpu.py`` runs the real thing on two GPUs; its CPU form runs here.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch

import kvprune.engine.session as engine
from kvprune import ComposedPress, FramePress, get_press, list_presses
from kvprune.engine.compression import PrefillCompression, _Tables
from kvprune.engine.token_evidence import Evidence
from kvprune.engine.slots import SlotMap
from tests.support.helpers import K, model
from tests.support.paths import load_script
from tests.support.tiny_models import FAMILIES, N_LAYERS
from tests.support.virtual_devices import CrossDevice, VirtualDevices, device_of, on

ROWS = [[("text", 3), ("audio", 12), ("text", 4), ("audio", 8), ("text", 5)], [("text", 5), ("audio", 16), ("text", 3)]]
SPLITS = range(1, N_LAYERS + 1)  # the first decoder layer on the second device (N_LAYERS: only the norm and head)


def device(layer: int, split: int) -> int:
    return int(layer >= split)


@pytest.fixture(scope="module")
def recorded_drops():
    """Every token-dropping press's ``drop_slots`` call on a two-row batch, with its result."""
    calls = {}
    original = engine.drop_slots
    m = model("qwen2_5_omni", "sdpa")
    inputs = FAMILIES["qwen2_5_omni"].inputs(ROWS)
    for name in list_presses(kind="token"):
        def recording(press, clips, evidence, unpruned, prompt_len, name=name):
            slots, kept = original(press, clips, evidence, unpruned, prompt_len)
            calls[name] = (press, clips, copy.copy(evidence), unpruned, prompt_len, slots, kept)
            return slots, kept

        engine.drop_slots = recording
        try:
            with torch.no_grad(), get_press(name, layer=K)(m, ratio=0.6):
                m(**inputs)
        finally:
            engine.drop_slots = original
    return calls


@pytest.mark.parametrize("name", list_presses(kind="token"))
@pytest.mark.parametrize("split", SPLITS)
def test_token_presses_choose_the_same_tokens_with_their_inputs_on_two_devices(recorded_drops, name, split):
    press, clips, evidence, unpruned, prompt_len, slots, kept = recorded_drops[name]
    placed = Evidence(
        candidates=on(evidence.candidates.clone(), 0), valid=on(evidence.valid.clone(), 0),
        host_candidates=evidence.host_candidates, host_valid=evidence.host_valid,
        host_placeholders=evidence.host_placeholders, sample_keys=evidence.sample_keys,
        attention=on(_clone(evidence.attention), device(K - 1, split)), keys=on(_clone(evidence.keys), device(K - 1, split)),
        hidden=on(_clone(evidence.hidden), 1),  # the final norm sits with the last layers
    )
    with VirtualDevices():
        split_slots, split_kept = engine.drop_slots(press, clips, placed, [on(u.clone(), 0) for u in unpruned], prompt_len)
    assert device_of(split_slots.index) == 0, "the slots are laid out on the prompt's device"
    assert torch.equal(split_slots.index, slots.index) and torch.equal(split_slots.valid, slots.valid)
    assert [[k.tolist() for k in row] for row in split_kept] == [[k.tolist() for k in row] for row in kept]


def test_the_replay_catches_an_index_on_the_wrong_device(recorded_drops):
    """The check is not vacuous: DART as it was (indices on the keys' device into hidden states on
    another) fails under it."""
    press, clips, evidence, *_ = recorded_drops["dart"]
    hidden = on(_clone(evidence.hidden), 1)
    pivots = on(torch.tensor([3, 4]), 0)
    with VirtualDevices(), pytest.raises(CrossDevice, match="cuda:0 indexes one on cuda:1"):
        hidden[0][pivots]


def _clone(tensor):
    return None if tensor is None else tensor.clone()


CACHE_METHODS = [*(get_press(name, ratio=0.5) for name in list_presses(kind="cache")),
                 get_press("snapkv", ratio=0.5, scope="prompt", window=4),
                 ComposedPress([FramePress(ratio=0.5, layer=K), get_press("tova", ratio=0.5)])]


@pytest.fixture(scope="module")
def recorded_compressions():
    """Every cache press's ``PrefillCompression.compress`` calls (a copy of the state before each),
    with their results."""
    calls = {}
    original = PrefillCompression.compress
    m = model("qwen2_5_omni", "eager")
    inputs = FAMILIES["qwen2_5_omni"].inputs(ROWS)
    for method in CACHE_METHODS:
        label = repr(method)
        calls[label] = []

        def recording(self, press, layer, n_layers, label=label):
            before = copy.deepcopy((self, layer))
            result = original(self, press, layer, n_layers)
            calls[label].append((before, press, n_layers, result, layer.cache.keys.clone()))
            return result

        PrefillCompression.compress = recording
        try:
            with torch.no_grad(), method(m):
                m(**inputs)
        finally:
            PrefillCompression.compress = original
    return calls


@pytest.mark.parametrize("method", CACHE_METHODS, ids=lambda m: m.parts()[-1].__class__.__name__ + ("+frame" if len(m.parts()) > 1 else "")
                         + (":prompt" if m.parts()[-1].scope == "prompt" else ""))
@pytest.mark.parametrize("split", [1, 2, 3])
def test_cache_presses_keep_the_same_entries_with_each_layer_on_its_device(recorded_compressions, method, split):
    calls = recorded_compressions[repr(method)]
    assert calls, "the press compressed something"
    for state, press, n_layers, (slots, before, after), keys in calls:
        compression, layer = copy.deepcopy(state)
        here = device(layer.index, split)
        for tensor in (layer.cache.keys, layer.cache.values, layer.queries):
            on(tensor, here)
        for tensor in (layer.rope_frequencies, *(layer.rope or ())):  # the decoder's rotary embedding, on the first device
            on(tensor, 0)
        for slot_map in (layer.slots, layer.query_slots):  # token-dropping slots are laid out on the prompt's device
            on(slot_map.index, 0), on(slot_map.valid, 0)
        (first,) = compression._tables.values()
        compression._tables = {torch.device("cuda", 0): _Tables(*(on(t, 0) for t in vars(first).values()))}
        with VirtualDevices():
            split_slots, split_before, split_after = compression.compress(press, layer, n_layers)
            assert layer.cache.keys.device == torch.device("cuda", here)
        assert (split_before, split_after) == (before, after)
        assert torch.equal(split_slots.index, slots.index) and torch.equal(split_slots.valid, slots.valid)
        assert torch.equal(layer.cache.keys, keys)


def test_slot_maps_follow_the_layer_they_serve():
    with VirtualDevices():
        slots = SlotMap.from_rows([torch.arange(4, device="cuda:0"), torch.arange(2, device="cuda:0")], prompt_len=6)
        moved = slots.to("cuda:1")
        assert moved.index.device == moved.valid.device == torch.device("cuda", 1)
        assert slots.index.device == torch.device("cuda", 0) and slots.to("cuda:0") is slots


def _multi_gpu_script():
    return load_script("check_multi_gpu")


def test_the_multi_gpu_check_runs_on_the_cpu():
    script = _multi_gpu_script()
    out = io.StringIO()
    families = [FAMILIES["voxtral"].family]
    assert script.check(families, ["dart", "snapkv"], ["eager"], [2, N_LAYERS], ("cpu", "cpu"), out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["voxtral        eager  dart               splits 2,4: ok",
                         "voxtral        eager  snapkv             splits 2,4: ok"]
    assert lines[-1] == "4 split runs compared with one device; 0 differ."
    m = FAMILIES["voxtral"].build()
    device_map = script.split_device_map(m, FAMILIES["voxtral"].family, 3, "first", "second")
    layers = {name: where for name, where in device_map.items() if ".layers." in name}
    assert layers == {f"model.language_model.layers.{j}": "first" if j < 3 else "second" for j in range(N_LAYERS)}
    assert device_map["model.language_model.norm"] == device_map["lm_head"] == "second"
    assert device_map["model.audio_tower"] == "first"


def test_the_multi_gpu_check_keeps_a_tied_head_with_the_embeddings():
    script = _multi_gpu_script()
    family = FAMILIES["granite_speech"]
    m = family.build()
    assert m.get_output_embeddings().weight is m.get_input_embeddings().weight
    device_map = script.split_device_map(m, family.family, 2, "first", "second")
    assert device_map["lm_head"] == "first" and device_map["model.language_model.norm"] == "second"


def test_the_multi_gpu_check_leaves_out_a_split_the_model_cannot_run_without_a_press(monkeypatch):
    script = _multi_gpu_script()
    dispatch = script.dispatch_model

    def broken(model, *args, **kwargs):  # a stock model that fails once dispatched
        model = dispatch(model, *args, **kwargs)
        model.generate = lambda **inputs: (_ for _ in ()).throw(KeyError(2))
        return model

    monkeypatch.setattr(script, "dispatch_model", broken)
    out = io.StringIO()
    assert script.check([FAMILIES["voxtral"].family], ["dart"], ["eager"], [2], ("cpu", "cpu"), out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "voxtral        eager  (no press)         split 2: the split model fails without kvprune, left out: KeyError: 2"
    assert lines[-1] == "0 split runs compared with one device; 0 differ. 1 splits fail without kvprune (left out)."
