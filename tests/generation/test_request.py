"""One ``generate`` call as a ``GenerateRequest``: the ratio applied to the press once, where the request is
made; a batch given again as the same object prefilled once; and what a ``GenerationObserver`` is told, in
order, on the engine's path and on stock ``generate``'s (the fallback)."""

from __future__ import annotations

import pytest
import torch

from kvprune import ComposedPress, FastVPress, FramePress, Generator, KNormPress
from kvprune.generation import ENGINE, FALLBACK, GenerateRequest, GenerationObserver
from kvprune.generation.request import press_of
from tests.support.helpers import model
from tests.support.tiny_models import FAMILIES

from .test_generation import NEW, NO_STOP, ROWS


class Recorder(GenerationObserver):
    """Every call it gets, in order, with the press it was shown."""

    def __init__(self):
        self.calls: list[str] = []
        self.presses: list = []

    def press_installed(self, press) -> None:
        self.calls.append("press")
        self.presses.append(press)

    def prefill_ended(self) -> None:
        self.calls.append("prefill")

    def decoding_started(self) -> None:
        self.calls.append("decoding")

    def decoding_ended(self) -> None:
        self.calls.append("decoded")


def test_the_ratio_is_applied_to_the_press_once_where_the_request_is_made():
    press = FastVPress(layer=2, ratio=0.1)
    assert press_of(press) is press
    assert press_of(press, 0.5) == FastVPress(layer=2, ratio=0.5) and press.ratio == 0.1  # a copy
    assert press_of("frame", 0.25) == FramePress(ratio=0.25)
    assert press_of(None, 0.5) is None
    composed = ComposedPress([FramePress(ratio=0.5), KNormPress(ratio=0.3)])
    assert press_of(composed) is composed
    with pytest.raises(ValueError, match="no single ratio"):
        press_of(composed, 0.5)


def test_a_batch_given_again_as_the_same_object_is_one_prefill_loaded_that_many_times():
    a, b = {"input_ids": torch.ones(1, 3, dtype=torch.long)}, {"input_ids": torch.ones(1, 3, dtype=torch.long)}
    request = GenerateRequest(batches=(a, a, b, a), press=None, max_new_tokens=2)
    assert [(batch is a, copies) for batch, copies in request.prefills] == [(True, 2), (False, 1), (True, 1)]
    assert request.rows == 4 and request.longest == 3
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        GenerateRequest(batches=(a,), press=None, max_new_tokens=0)


def test_the_observer_sees_each_prefill_then_decoding_on_the_engine():
    m, inputs = model("qwen2_audio", "sdpa"), FAMILIES["qwen2_audio"].inputs(ROWS)
    recorder = Recorder()
    out = Generator(m).generate([inputs, inputs, FAMILIES["qwen2_audio"].inputs(ROWS[:1])], max_new_tokens=NEW,
                                press=FastVPress(layer=2), ratio=0.5, observer=recorder, **NO_STOP)
    assert out.engine == ENGINE
    assert recorder.calls == ["press", "prefill", "press", "prefill", "decoding", "decoded"]  # the repeat: one prefill
    assert recorder.presses == [FastVPress(layer=2, ratio=0.5)] * 2
    assert [o.press for o in out.outcome] == [FastVPress(layer=2, ratio=0.5)] * 3
    assert all(s.kept_tokens < s.audio_tokens for o in out.outcome for s in o.stats)


def test_one_new_token_has_no_decoding_to_observe():
    m, inputs = model("qwen2_audio", "sdpa"), FAMILIES["qwen2_audio"].inputs(ROWS)
    recorder = Recorder()
    Generator(m).generate(inputs, max_new_tokens=1, observer=recorder, **NO_STOP)
    assert recorder.calls == ["prefill"]  # no press: nothing installed


def test_the_observer_sees_the_same_points_on_stock_generate():
    m, inputs = model("gemma3n", "sdpa"), FAMILIES["gemma3n"].inputs(ROWS)
    recorder = Recorder()
    out = Generator(m).generate([inputs, inputs], max_new_tokens=3, press="frame", ratio=0.5, observer=recorder, **NO_STOP)
    assert out.engine == FALLBACK  # one generate per batch given, repeats included
    assert recorder.calls == ["press", "prefill", "decoding", "decoded"] * 2
    assert recorder.presses == [FramePress(ratio=0.5)] * 2
    assert out.timing.kv_held_bytes == out.timing.kv_cache_bytes > 0 and out.timing.cache == "dynamic"
