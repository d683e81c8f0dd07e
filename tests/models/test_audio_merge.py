"""The audio merge of Voxtral, Granite Speech and Audio Flamingo 3 (``kvprune.encoders.merge``): stock, it waits on
the host for the audio encoder (its placeholder count check indexes the embeddings with a mask); with the fast
path it reads nothing back after the encoder, refuses a count that differs as stock does, and goes away cleanly.
The merged model's outputs equal stock's bit for bit: ``test_fast_encoder.test_model_under_press_bit_identical``."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

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


def _reads_after_the_encoder(m, inputs, fast: bool) -> list[str]:
    mode = HostReads()
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
