"""A prompt that is Voxtral's transcription request (``Prompt(..., transcription="en")``), as its model
card transcribes and AudioMarathon's Voxtral LibriSpeech script asks: the tokens its tekken tokenizer
defines for one, a press that prunes its audio, and a clear refusal elsewhere."""

from __future__ import annotations

import pytest
import torch

from kvprune import FramePress
from kvprune.models import QWEN2_AUDIO, VOXTRAL
from kvprune.models.loading import load_model
from kvprune.models.prompting import Prompt
from tests.support.tiny_checkpoints import checkpoint, qwen2_audio_checkpoint
from tests.support.tiny_processors import wave

# the tiny tekken file's ids (tests/support/tiny_processors.tekken_file): <s>, [INST], [BEGIN_AUDIO],
# [AUDIO], [/INST], [TRANSCRIBE]; byte b is token 40 + b (40 special tokens first)
BOS, INST, BEGIN_AUDIO, AUDIO, END_INST, TRANSCRIBE = 1, 3, 25, 24, 4, 34


@pytest.fixture(scope="module")
def voxtral(tmp_path_factory):
    return load_model(checkpoint("voxtral", tmp_path_factory.mktemp("voxtral")), device="cpu")


def test_the_request_is_the_tokens_mistral_common_defines(voxtral):
    """<s>[INST][BEGIN_AUDIO], one [AUDIO] per 80 ms of each 30 s chunk (375), [/INST], "lang:en", [TRANSCRIBE]."""
    inputs = voxtral.build_inputs([wave(3.0)], Prompt((0,), transcription="en"))
    expected = [BOS, INST, BEGIN_AUDIO, *[AUDIO] * 375, END_INST, *[40 + b for b in b"lang:en"], TRANSCRIBE]
    assert inputs["input_ids"][0].tolist() == expected
    assert tuple(inputs["input_features"].shape)[-1] == 3000  # one 30 s chunk of mel frames


def test_a_press_prunes_the_requests_audio(voxtral):
    inputs = voxtral.build_inputs([wave(3.0)], Prompt((0,), transcription="en"))
    with torch.no_grad(), FramePress(layer=1)(voxtral.model, ratio=0.5) as outcome:
        voxtral.generating_module.generate(**inputs, max_new_tokens=2, do_sample=False)
    assert [(s.audio_tokens, s.kept_tokens) for s in outcome.stats] == [(375, 188)]  # round(375 * 0.5)
    assert VOXTRAL.audio_token_id(voxtral.model) == AUDIO


def test_a_request_holds_one_clip_and_other_families_refuse_it(tmp_path):
    with pytest.raises(ValueError, match="one audio clip and nothing else"):
        Prompt((0, "Transcribe it."), transcription="en")
    with pytest.raises(ValueError, match="one audio clip and nothing else"):
        Prompt((0,), system="You are a helpful assistant.", transcription="en")
    qwen2_audio = load_model(qwen2_audio_checkpoint(tmp_path / "qwen2_audio"), device="cpu")
    assert qwen2_audio.family is QWEN2_AUDIO
    with pytest.raises(ValueError, match="this family has no transcription request"):
        qwen2_audio.build_inputs([wave(1.0)], Prompt((0,), transcription="en"))
