"""Loading checkpoints from local folders and building prompts the way each family's processor does."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import soundfile as sf
import torch

from kvprune import FastVPress
from kvprune.harness.demo import DEMO_MODEL_DIR
from kvprune.models import AERO, PHI4_MULTIMODAL, QWEN2_5_OMNI, QWEN2_AUDIO, VOXTRAL
from kvprune.models.loading import ModelLoadError, load_model
from kvprune.models.prompting import SAMPLING_RATE, ChatFormat, Prompt, chunks, wav_bytes
from kvprune.models.tiny import MELS
from tests.support.tiny_checkpoints import qwen2_audio_checkpoint


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
    with torch.no_grad(), FastVPress(layer=2)(loaded.model, ratio=0.5) as outcome:
        out = loaded.generating_module.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert [(s.audio_tokens, s.kept_tokens) for s in outcome.stats] == [(1000, 500)]
    assert isinstance(loaded.decode(out[:, inputs["input_ids"].shape[1]:]), str)


def test_missing_or_unreadable_checkpoints_say_so(tmp_path):
    with pytest.raises(ModelLoadError, match="model directory .* not found"):
        load_model(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="cannot read the config"):
        load_model(tmp_path / "empty")
    with pytest.raises(ValueError, match="dtype='int8' is invalid"):
        load_model("demo", dtype="int8")


def test_chunks_cut_a_clip_at_the_chunk_length():
    assert [len(p) / SAMPLING_RATE for p in chunks(_wave(65.0), 30.0)] == [30.0, 30.0, 5.0]
    assert [len(p) / SAMPLING_RATE for p in chunks(_wave(10.0), 30.0)] == [10.0]
    assert chunks(_wave(65.0), None)[0].shape == (65 * SAMPLING_RATE,)


def collapsed(tokens: list[str], audio: str) -> list[str]:
    """Tokens with each run of the audio placeholder written once as ``<audio>xN``."""
    out: list[str] = []
    for token in tokens:
        if token == audio and out and out[-1].startswith(audio):
            out[-1] = f"{audio}x{int(out[-1].rsplit('x', 1)[1]) + 1}"
        else:
            out.append(f"{audio}x1" if token == audio else token)
    return out


# -- prompt segments reach each family's processor in order -------------------------------------------


def test_segments_reach_qwen2_audio_in_order_with_long_clips_chunked_in_place(qwen2_audio_dir):
    """Text, a 1 s clip, text, a 40 s clip (two 30 s chunks, each its own audio item) and the question,
    after a system turn: its template numbers the audio items itself ("Audio n:") and writes the text
    items as they are (so the text segments end with a newline here)."""
    loaded = load_model(qwen2_audio_dir, device="cpu")
    prompt = Prompt(("A\n", 0, "B\n", 1, "What is heard ?"), system="You are a helpful .")
    inputs = loaded.build_inputs([_wave(1.0), _wave(40.0, seed=1)], prompt)
    tokens = loaded.processor.tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    clip = lambda n, count: ["Audio", str(n), ":", "<|audio_bos|>", f"<|AUDIO|>x{count}", "<|audio_eos|>"]  # noqa: E731
    assert collapsed(tokens, "<|AUDIO|>") == [
        "<|im_start|>", "system", "You", "are", "a", "helpful", ".", "<|im_end|>", "<|im_start|>", "user",
        "A", *clip(1, 25), "B", *clip(2, 750), *clip(3, 250), "What", "is", "heard", "?", "<|im_end|>",
        "<|im_start|>", "assistant",
    ]


def test_segments_reach_qwen2_5_omni_in_order():
    """The demo's Qwen2.5-Omni processor (its own word-level tokenizer): a system turn, then two
    labelled clips of 1 s and 2 s (25 and 50 tokens, framed by audio start and end) and the question."""
    processor = QWEN2_5_OMNI.loading.load_processor(DEMO_MODEL_DIR)
    prompt = Prompt(("clip 1 ", 0, "clip 2 ", 1, "Which clip comes first ?"), system="Reply with the letter .")
    inputs = QWEN2_5_OMNI.prompting.build_inputs(processor, [_wave(1.0), _wave(2.0, seed=1)], prompt)
    tokens = processor.tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    clip = lambda count: ["<|audio_bos|>", f"<|AUDIO|>x{count}", "<|audio_eos|>"]  # noqa: E731
    assert collapsed(tokens, "<|AUDIO|>") == [
        "<|im_start|>", "system", "Reply", "with", "the", "letter", ".", "<|im_end|>", "<|im_start|>", "user",
        "clip", "1", *clip(25), "clip", "2", *clip(50), "Which", "clip", "comes", "first", "?", "<|im_end|>",
        "<|im_start|>", "assistant",
    ]
    assert inputs["input_features"].shape[0] == 2  # one feature row per clip, in prompt order


def test_a_text_prompt_is_every_clip_then_the_text():
    assert Prompt.of("Q ?", 2) == Prompt((0, 1, "Q ?"))
    with pytest.raises(ValueError, match=r"prompt segments use clips \[0\], but 2 clip\(s\) were given"):
        ChatFormat().messages([_wave(1.0), _wave(1.0)], Prompt((0, "Q ?")))
    with pytest.raises(TypeError, match="a prompt segment is text"):
        Prompt((0.5,))


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
    AERO.prompting.build_inputs(processor, [_wave(70.0)], "What is heard ?")
    (_, conversation, _), (_, _, call) = processor.calls
    items = conversation[0]["content"]
    assert [item["type"] for item in items] == ["audio_url"] * 3 + ["text"]
    assert [len(w) for w in call["audios"]] == [30 * SAMPLING_RATE, 30 * SAMPLING_RATE, 10 * SAMPLING_RATE]
    assert call["sampling_rate"] == SAMPLING_RATE and call["text"] == "rendered"


def test_aero_and_phi4_get_segments_in_order_with_chunks_in_place():
    """Text and clips interleaved: Aero-1's 40 s clip becomes two items where the clip stands, and the
    processor gets the pieces in the items' order; Phi-4's template writes one <|audio|> per item."""
    waves = [_wave(2.0), _wave(40.0, seed=1)]
    prompt = Prompt(("first", 0, "second", 1, "What is heard ?"), system="Be brief.")
    for family, kind, keyword, pieces in ((AERO, "audio_url", "audios", [2.0, 30.0, 10.0]), (PHI4_MULTIMODAL, "audio", "audio", [2.0, 40.0])):
        processor = RecordingProcessor()
        family.prompting.build_inputs(processor, waves, prompt)
        (_, conversation, kwargs), (_, _, call) = processor.calls
        system, user = conversation
        assert system == {"role": "system", "content": "Be brief."} and kwargs["add_generation_prompt"]
        shown = [item.get("text", item["type"]) for item in user["content"]]
        audio = [kind] * (len(pieces) - 1)
        assert shown == ["first", kind, "second", *audio, "What is heard ?"]
        assert [len(w) / SAMPLING_RATE for w in call[keyword]] == pieces


def test_voxtral_gets_each_clip_as_base64_wav_in_its_message():
    processor = RecordingProcessor()
    clips = [_wave(3.0, seed=1), _wave(2.0, seed=2)]
    VOXTRAL.prompting.build_inputs(processor, clips, "What is heard ?")
    (_, conversation, kwargs), = processor.calls
    items = conversation[0]["content"]
    assert [item["type"] for item in items] == ["audio", "audio", "text"] and items[-1]["text"] == "What is heard ?"
    for item, clip in zip(items, clips):
        decoded, rate = sf.read(io.BytesIO(base64.b64decode(item["base64"])), dtype="float32")
        assert rate == SAMPLING_RATE and np.array_equal(decoded, clip)
    assert kwargs["tokenize"] and kwargs["return_dict"]


def test_voxtral_gets_segments_as_ordered_chunks_of_its_message():
    processor = RecordingProcessor()
    clips = [_wave(1.0, seed=1), _wave(2.0, seed=2)]
    VOXTRAL.prompting.build_inputs(processor, clips, Prompt(("Audio 2:", 1, "Audio 1:", 0, "Which ?"), system="S."))
    (_, (system, user), _), = processor.calls
    assert system == {"role": "system", "content": "S."}
    assert [item.get("text", item["type"]) for item in user["content"]] == ["Audio 2:", "audio", "Audio 1:", "audio", "Which ?"]
    decoded = [sf.read(io.BytesIO(base64.b64decode(item["base64"])), dtype="float32")[0]
               for item in user["content"] if item["type"] == "audio"]
    assert [len(d) for d in decoded] == [2 * SAMPLING_RATE, SAMPLING_RATE]  # clip 1 first, as the segments say


def test_wav_written_by_hand_is_a_float_wav_that_reads_back_bit_for_bit():
    wave = 0.3 * np.random.default_rng(4).standard_normal(16_001)  # float64, odd length: converted to float32
    data = wav_bytes(wave)
    info = sf.info(io.BytesIO(data))
    assert (info.format, info.subtype, info.channels, info.samplerate, info.frames) == ("WAV", "FLOAT", 1, SAMPLING_RATE, 16_001)
    decoded, _ = sf.read(io.BytesIO(data), dtype="float32")
    assert np.array_equal(decoded, wave.astype(np.float32))
