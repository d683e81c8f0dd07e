"""Loading checkpoints from local folders and building prompts the way each family's processor does."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import soundfile as sf
import torch

from kvprune import FastVPress
from kvprune.models import AERO, QWEN2_AUDIO, VOXTRAL
from kvprune.models.loading import ModelLoadError, load_model
from kvprune.models.prompting import SAMPLING_RATE, split_chunks, wav_bytes
from tiny_checkpoints import MELS, qwen2_audio_checkpoint

@pytest.fixture(scope="module")
def qwen2_audio_dir(tmp_path_factory):
    """A tiny Qwen2-Audio checkpoint with its real processor class, written by save_pretrained."""
    return qwen2_audio_checkpoint(tmp_path_factory.mktemp("qwen2_audio"))


def _wave(seconds: float, seed: int = 0) -> np.ndarray:
    return (0.1 * np.random.default_rng(seed).standard_normal(int(seconds * SAMPLING_RATE))).astype(np.float32)


def test_local_checkpoint_loads_and_long_audio_is_cut_into_30_second_clips(qwen2_audio_dir):
    loaded = load_model(qwen2_audio_dir, device="cpu")
    assert loaded.family is QWEN2_AUDIO and type(loaded.processor).__name__ == "Qwen2AudioProcessor"
    inputs = loaded.build_inputs([_wave(40.0)], "What is heard ?")
    audio = (inputs["input_ids"][0] == loaded.family.audio_token_id(loaded.model)).int()
    runs = torch.diff(torch.cat([torch.zeros(1, dtype=torch.int), audio, torch.zeros(1, dtype=torch.int)])).nonzero().flatten().view(-1, 2)
    assert [int(end - start) for start, end in runs] == [750, 250]  # 30 s + 10 s at 25 tokens per second
    assert tuple(inputs["input_features"].shape) == (2, MELS, 3000)
    with torch.no_grad(), FastVPress(layer=2)(loaded.model, ratio=0.5) as run:
        out = loaded.generator.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert [(s.audio_tokens, s.kept_tokens) for s in run.stats] == [(1000, 500)]
    assert isinstance(loaded.decode(out[:, inputs["input_ids"].shape[1]:]), str)


def test_missing_or_unreadable_checkpoints_say_so(tmp_path):
    with pytest.raises(ModelLoadError, match="model directory .* not found"):
        load_model(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="cannot read the config"):
        load_model(tmp_path / "empty")
    with pytest.raises(ValueError, match="dtype='int8' is invalid"):
        load_model("demo", dtype="int8")


def test_split_chunks_cuts_every_clip_at_the_chunk_length():
    pieces = split_chunks([_wave(65.0), _wave(10.0)], 30.0)
    assert [len(p) / SAMPLING_RATE for p in pieces] == [30.0, 30.0, 5.0, 10.0]
    assert split_chunks([_wave(65.0)], None)[0].shape == (65 * SAMPLING_RATE,)


class RecordingProcessor:
    """Stands in for processors that cannot be built offline (remote code, mistral-common), and
    records what the family's prompt builder hands them."""

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, conversation, **kwargs):
        self.calls.append(("template", conversation, kwargs))
        return "rendered"

    def __call__(self, **kwargs):
        self.calls.append(("call", None, kwargs))
        return {"input_ids": torch.zeros(1, 1, dtype=torch.long)}


def test_aero_gets_one_audio_item_per_30_second_chunk_under_its_own_keyword():
    processor = RecordingProcessor()
    AERO.build_inputs(processor, [_wave(70.0)], "What is heard ?")
    (_, conversation, _), (_, _, call) = processor.calls
    items = conversation[0]["content"]
    assert [item["type"] for item in items] == ["audio_url"] * 3 + ["text"]
    assert [len(w) for w in call["audios"]] == [30 * SAMPLING_RATE, 30 * SAMPLING_RATE, 10 * SAMPLING_RATE]
    assert call["sampling_rate"] == SAMPLING_RATE and call["text"] == "rendered"


def test_voxtral_gets_each_clip_as_base64_wav_in_its_message():
    processor = RecordingProcessor()
    clips = [_wave(3.0, seed=1), _wave(2.0, seed=2)]
    VOXTRAL.build_inputs(processor, clips, "What is heard ?")
    (_, conversation, kwargs), = processor.calls
    items = conversation[0]["content"]
    assert [item["type"] for item in items] == ["audio", "audio", "text"] and items[-1]["text"] == "What is heard ?"
    for item, clip in zip(items, clips):
        decoded, rate = sf.read(io.BytesIO(base64.b64decode(item["base64"])), dtype="float32")
        assert rate == SAMPLING_RATE and np.array_equal(decoded, clip)
    assert kwargs["tokenize"] and kwargs["return_dict"]


def test_wav_written_by_hand_is_a_float_wav_that_reads_back_bit_for_bit():
    wave = 0.3 * np.random.default_rng(4).standard_normal(16_001)  # float64, odd length: converted to float32
    data = wav_bytes(wave)
    info = sf.info(io.BytesIO(data))
    assert (info.format, info.subtype, info.channels, info.samplerate, info.frames) == ("WAV", "FLOAT", 1, SAMPLING_RATE, 16_001)
    decoded, _ = sf.read(io.BytesIO(data), dtype="float32")
    assert np.array_equal(decoded, wave.astype(np.float32))
