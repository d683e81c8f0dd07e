"""The audio merge of Voxtral, Granite Speech and Audio Flamingo 3 (``kvprune.encoders.merge``): stock, it waits on
the host for the audio encoder (its placeholder count check indexes the embeddings with a mask; Granite's and
Audio Flamingo 3's selection of the encoder's valid frames is a boolean index too); with the fast path it reads
nothing back after the encoder, keeps the frames stock keeps, refuses a count that differs as stock does, and
goes away cleanly. The merged model's outputs equal stock's bit for bit:
``test_fast_encoder.test_model_under_press_bit_identical``."""

from __future__ import annotations

import os
import sys
import traceback
from contextlib import nullcontext

import pytest
import torch
import torch.nn as nn
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

from kvprune import FastVPress, fast_audio_encoder
from kvprune.encoders import merge
from kvprune.models.tiny import AUDIO_TOKEN
from tests.generation.test_host_sync import HostReads, _generate, encoder_end
from tests.support.helpers import model
from tests.support.tiny_models import FAMILIES

pytestmark = pytest.mark.usefixtures("one_thread")

MERGING = {"voxtral": "VoxtralModel", "granite_speech": "GraniteSpeechModel", "audioflamingo3": "AudioFlamingo3Model"}
ROW = [[("text", 3), ("audio", 12), ("text", 4)]]


def merging_model(m: nn.Module, family: str) -> nn.Module:
    return next(module for module in m.modules() if type(module).__name__ == MERGING[family])


TORCH, TRANSFORMERS = (os.path.dirname(package.__file__) + os.sep for package in (torch, transformers))


class ModelShapesFromValues(TorchDispatchMode):
    """Records the operators of the model's own code (transformers') whose result's size depends on values: on
    a GPU each reads the device on the host (``nonzero``; an index or assignment by a boolean mask). The CPU cannot
    tell such a read of a device tensor from one of a host tensor (the engine's bookkeeping), hence the filter."""

    NAMES = {"nonzero", "masked_select", "index", "index_put", "index_put_"}

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.NAMES and (name in ("nonzero", "masked_select") or _boolean_index(args)):
            caller = next(f for f in reversed(traceback.extract_stack(sys._getframe(1))) if not f.filename.startswith(TORCH))
            if caller.filename.startswith(TRANSFORMERS):
                self.seen.append(f"{func} at {caller.filename.rsplit('/', 1)[-1]}:{caller.lineno}")
        return func(*args, **(kwargs or {}))


def _boolean_index(args) -> bool:
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


class ReadsAndSizes:
    """Values read as numbers and sizes that depend on values, recorded together."""

    def __init__(self):
        self.modes = (HostReads(), ModelShapesFromValues())

    def __enter__(self):
        for mode in self.modes:
            mode.__enter__()

    def __exit__(self, *exc):
        for mode in reversed(self.modes):
            mode.__exit__(*exc)

    @property
    def seen(self) -> list[str]:
        return [op for mode in self.modes for op in mode.seen]


def _reads_after_the_encoder(m, inputs, fast: bool) -> list[str]:
    mode = ReadsAndSizes()
    handle = fast_audio_encoder(m) if fast else None
    try:
        _generate(m, inputs, FastVPress(layer=2, ratio=0.5), mode.__enter__, lambda: mode.__exit__(None, None, None), encoder_end)
    finally:
        if handle is not None:
            handle.remove()
    return mode.seen


@pytest.mark.parametrize("family", MERGING)
def test_the_merge_reads_nothing_back_after_the_audio_encoder(family):
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROW)
    assert _reads_after_the_encoder(m, inputs, fast=False) != []  # stock waits for the encoder: the instrument sees it
    assert _reads_after_the_encoder(m, inputs, fast=True) == []


def test_the_recorder_sees_a_boolean_index_in_the_models_code():
    """The instrument itself: the frames' boolean index of Granite's stock merge is caught, the same operator in a
    test (not the model's code) is not."""
    m, inputs = model("granite_speech", "sdpa"), FAMILIES["granite_speech"].inputs(ROW)
    mode = ModelShapesFromValues()
    with mode, torch.no_grad():
        torch.ones(3)[torch.tensor([True, False, True])]
        assert mode.seen == []
        m(**inputs)
    assert any("aten.index.Tensor" in op and "granite_speech" in op for op in mode.seen), mode.seen


AF3_WINDOW_LENGTHS = [[128], [5], [128, 128, 37], [0, 1, 2, 3, 4], [128, 0, 127, 64, 65]]


@pytest.mark.parametrize("lengths", AF3_WINDOW_LENGTHS, ids=str)
def test_audio_flamingo_3_keeps_each_windows_frames_as_stock_does(lengths):
    """Each window cut to its output length (by the encoder's formula, pooled), in stock's order, bit for bit."""
    m = model("audioflamingo3", "sdpa")
    merging = merging_model(m, "audioflamingo3")
    window = 2 * merging.config.audio_config.max_source_positions
    assert max(lengths) <= window == 128
    torch.manual_seed(0)
    features = torch.randn(len(lengths), merging.config.audio_config.num_mel_bins, window)
    mask = (torch.arange(window)[None] < torch.tensor(lengths)[:, None]).long()
    with torch.no_grad():
        stock = merging.get_audio_features(features, mask, return_dict=True).pooler_output
        with fast_audio_encoder(m):
            assert isinstance(merging.__dict__["get_audio_features"], merge.CutFrames)
            fast = merging.get_audio_features(features, mask, return_dict=True).pooler_output
    convolved = [(n - 1) // 2 + 1 for n in lengths]  # the stride-2 convolution, then the pool over pairs
    expected_rows = sum(min(max((c - 2) // 2 + 1, 0), window // 4) for c in convolved)
    assert stock.shape[0] == expected_rows and torch.equal(fast, stock)


def _granite_merged_embeddings(m, inputs) -> torch.Tensor:
    """The embeddings Granite's language model receives (the merge's result)."""
    seen = []
    language_model = merging_model(m, "granite_speech").language_model
    hook = language_model.register_forward_pre_hook(lambda _, args, kwargs: seen.append(kwargs["inputs_embeds"]),
                                                    with_kwargs=True)
    try:
        with torch.no_grad():
            m(**inputs)
    finally:
        hook.remove()
    return seen[0]


def test_granite_speech_keeps_the_frames_its_mask_selects_as_stock_does():
    """The processor's masks (a prefix of each row) and a mask that selects frames spread over a row."""
    rows = [[("text", 3), ("audio", 12), ("text", 4)], [("text", 6), ("audio", 8), ("text", 2)]]
    m, inputs = model("granite_speech", "sdpa"), FAMILIES["granite_speech"].inputs(rows)
    spread = inputs["input_features_mask"].clone()
    spread[1] = torch.tensor([1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0], dtype=torch.bool)  # 8 of 12, as the placeholders
    for mask in (inputs["input_features_mask"], spread):
        case = {**inputs, "input_features_mask": mask}
        stock = _granite_merged_embeddings(m, case)
        with fast_audio_encoder(m):
            fast = _granite_merged_embeddings(m, case)
        assert torch.equal(fast, stock)
    assert not torch.equal(_granite_merged_embeddings(m, {**inputs, "input_features_mask": spread}),
                           _granite_merged_embeddings(m, inputs))  # the two masks select different frames


def test_a_granite_mask_that_selects_too_few_frames_is_refused_as_stock_refuses_it():
    m, inputs = model("granite_speech", "sdpa"), FAMILIES["granite_speech"].inputs(ROW)
    mask = inputs["input_features_mask"].clone()
    mask[0, 0] = False
    errors = []
    for fast in (False, True):
        with (fast_audio_encoder(m) if fast else nullcontext()), pytest.raises(ValueError) as raised, torch.no_grad():
            m(**{**inputs, "input_features_mask": mask})
        errors.append(str(raised.value))
    assert errors[0] == errors[1] and "do not match" in errors[0]


@pytest.mark.parametrize("family", MERGING)
def test_a_placeholder_count_that_differs_is_refused_as_stock_refuses_it(family):
    m, inputs = model(family, "sdpa"), FAMILIES[family].inputs(ROW)
    ids = inputs["input_ids"].clone()
    ids[0, (ids[0] == AUDIO_TOKEN).nonzero()[0, 0]] = 5  # one placeholder fewer than the encoder's frames
    message = r"Audio features and audio tokens do not match, tokens: 11, features: 12"
    for fast in (False, True):
        handle = fast_audio_encoder(m) if fast else None
        with pytest.raises(ValueError, match=message), torch.no_grad():
            m(**{**inputs, "input_ids": ids})
        if handle is not None:
            handle.remove()


def test_the_handle_names_the_merge_and_its_removal_leaves_no_hook():
    m = model("voxtral", "sdpa")
    merging = merging_model(m, "voxtral")
    hooks = dict(merging._forward_pre_hooks)
    outer = fast_audio_encoder(m)
    assert any(line.startswith("model (VoxtralModel): audio merge") for line in outer.changes), outer.changes
    installed = merging.get_placeholder_mask
    with fast_audio_encoder(m):
        assert merging.get_placeholder_mask is installed  # one install for both handles, one hook
        assert len(merging._forward_pre_hooks) == len(hooks) + 1
    assert isinstance(merging.__dict__["get_placeholder_mask"], merge.HostCheckedMask)  # the outer handle holds it
    outer.remove()
    assert "get_placeholder_mask" not in merging.__dict__ and dict(merging._forward_pre_hooks) == hooks


def test_a_prompt_given_as_embeddings_takes_the_stock_check():
    m = model("voxtral", "sdpa")
    merging = merging_model(m, "voxtral")
    inputs = FAMILIES["voxtral"].inputs(ROW)
    embeds = m.get_input_embeddings()(inputs["input_ids"])
    features = torch.randn(12, embeds.shape[-1])
    with fast_audio_encoder(m), torch.no_grad():
        assert merging.get_placeholder_mask.count is None  # no forward has counted placeholders
        mask = merging.get_placeholder_mask(None, embeds, features)
    expected = (inputs["input_ids"] == AUDIO_TOKEN).unsqueeze(-1).expand_as(embeds)
    assert torch.equal(mask, expected)


def test_another_form_of_the_method_is_left_stock():
    """A transformers version whose merge takes other arguments keeps its own (and says so)."""

    class VoxtralModel(nn.Module):  # the name the fast path looks for, with a method of another form
        def get_placeholder_mask(self, input_ids, inputs_embeds, image_features=None, audio_features=None):
            return input_ids

    module = VoxtralModel()
    with fast_audio_encoder(module) as fast:
        assert fast.changes == () and "not the form kvprune replaces" in fast.unchanged[0]
        assert "get_placeholder_mask" not in module.__dict__
