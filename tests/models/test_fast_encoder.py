"""The fast audio encoders: bit-identical to the stock ones, really faster in what they change, and
installed and removed cleanly (nesting, errors, attributes someone else set). The encoders whose layers
run as functions of their weights have their own module (``test_fast_encoder_layers.py``)."""

from __future__ import annotations

import contextlib
import csv
import itertools

import numpy as np
import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.phi4_multimodal import modeling_phi4_multimodal
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder

from kvprune import FastVPress, UnsupportedModelError, fast_audio_encoder
from kvprune.encoders.phi4 import chunk_mask
from tests.support.helpers import GREEDY, model
from tests.support.paths import load_script
from tests.support.tiny_models import FAMILIES, config_for_tests

OMNI_CONFIG = config_for_tests(FAMILIES["qwen2_5_omni"].family)
N_MELS = OMNI_CONFIG.audio_config.num_mel_bins

DTYPES = [torch.float32, torch.bfloat16]
ATTENTION = ["sdpa", "eager"]


def encoder_of(module: torch.nn.Module, class_name: str) -> torch.nn.Module:
    return next(m for m in module.modules() if type(m).__name__ == class_name)


def replaced(module: torch.nn.Module) -> list[str]:
    """Names of the submodules whose methods are replaced on the instance."""
    methods = {"forward", "_streaming_mask", "_get_feat_extract_output_lengths"}
    return [name for name, m in module.named_modules() if methods & set(m.__dict__)]


# -- Qwen2.5-Omni: windows batched -------------------------------------------------------------------
OMNI_LAYERS = 2
WINDOW_FRAMES = 2 * OMNI_CONFIG.audio_config.n_window  # 16 mel frames, 8 tokens after the stride-2 conv
CLIP_FRAMES = {
    "partial last window": [37],
    "whole windows only": [2 * WINDOW_FRAMES],  # the frame count that trips the stock chunking on 5.17
    "one short window": [5],
    "several clips": [48, 37, 5, 16, 100],
}


def omni_encoder(attn: str, dtype=torch.float32) -> torch.nn.Module:
    config = OMNI_CONFIG.audio_config
    config.encoder_layers = OMNI_LAYERS
    torch.manual_seed(0)
    return Qwen2_5OmniAudioEncoder._from_config(config, attn_implementation=attn, dtype=dtype).eval()


def omni_inputs(frames: list[int], dtype=torch.float32) -> dict:
    """Clips concatenated on the frame axis, as the thinker's get_audio_features passes them."""
    torch.manual_seed(1)
    return dict(input_features=torch.randn(N_MELS, sum(frames), dtype=dtype), feature_lens=torch.tensor(frames))


def window_tokens(frames: list[int]) -> list[int]:
    """Token count of every attention window, clip after clip."""
    lengths = []
    for n in frames:
        lengths += [(w - 1) // 2 + 1 for w in [WINDOW_FRAMES] * (n // WINDOW_FRAMES) + [n % WINDOW_FRAMES] if w]
    return lengths


@pytest.mark.parametrize("frames", CLIP_FRAMES.values(), ids=CLIP_FRAMES.keys())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("attn", ATTENTION)
def test_omni_encoder_bit_identical(attn, dtype, frames):
    encoder, inputs = omni_encoder(attn, dtype), omni_inputs(frames, dtype)
    with torch.no_grad():
        stock = encoder(**inputs).last_hidden_state
        with fast_audio_encoder(encoder):
            fast = encoder(**inputs).last_hidden_state
    assert fast.shape == (sum(((n - 1) // 2 + 1 - 2) // 2 + 1 for n in frames), OMNI_CONFIG.audio_config.output_dim)
    assert torch.equal(stock, fast)


def test_omni_one_attention_call_per_run_and_one_host_read(monkeypatch):
    """Stock: one SDPA call per window, and the window lengths read back to the host three times per
    layer (to split q, k and v). Fast: one call per run of equal-length windows, one read per call."""
    frames = CLIP_FRAMES["several clips"]
    calls = {"sdpa": 0, "tolist": 0}
    sdpa, tolist = torch.nn.functional.scaled_dot_product_attention, torch.Tensor.tolist

    def counting_sdpa(*args, **kwargs):
        calls["sdpa"] += 1
        return sdpa(*args, **kwargs)

    def counting_tolist(self):
        calls["tolist"] += 1
        return tolist(self)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting_sdpa)
    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    encoder, inputs = omni_encoder("sdpa"), omni_inputs(frames)
    counts = {}
    for variant in ("stock", "fast"):
        calls.update(sdpa=0, tolist=0)
        with torch.no_grad(), fast_audio_encoder(encoder) if variant == "fast" else contextlib.nullcontext():
            encoder(**inputs)
        counts[variant] = dict(calls)
    windows = window_tokens(frames)
    runs = len([length for length, _ in itertools.groupby(windows)])
    assert runs < len(windows)
    assert counts["stock"]["sdpa"] == OMNI_LAYERS * len(windows)
    assert counts["fast"]["sdpa"] == OMNI_LAYERS * runs
    # both also read the chunk lengths once when cutting the features into windows
    assert counts["stock"]["tolist"] == 1 + 3 * OMNI_LAYERS
    assert counts["fast"]["tolist"] == 1 + 1


def test_omni_output_lengths_come_from_the_host_with_the_stock_values():
    """The model checks the encoder's output against these lengths after the encoder: on the host, that
    check waits for nothing (on a GPU, ``tests/generation/test_host_sync.py`` sees no synchronisation)."""
    encoder = omni_encoder("sdpa")
    lengths = torch.tensor(CLIP_FRAMES["several clips"])
    stock = encoder._get_feat_extract_output_lengths(lengths)
    with fast_audio_encoder(encoder):
        fast = encoder._get_feat_extract_output_lengths(lengths)
    assert fast[1].device.type == "cpu"
    assert all(torch.equal(a, b) for a, b in zip(stock, fast))
    assert "_get_feat_extract_output_lengths" not in encoder.__dict__


def test_omni_other_attention_implementations_keep_the_stock_path():
    """An implementation the fast path does not batch (flash attention, a registered function) gets
    the stock forward: here a registered sdpa wrapper still sees one call per window."""
    seen = []

    def recording_attention(module, query, *args, **kwargs):
        seen.append(query.shape[0])
        return sdpa_attention_forward(module, query, *args, **kwargs)

    AttentionInterface.register("kvprune_test_windows", recording_attention)
    frames = CLIP_FRAMES["several clips"]
    encoder, inputs = omni_encoder("sdpa"), omni_inputs(frames)
    with torch.no_grad():
        stock = encoder(**inputs).last_hidden_state
        encoder.config._attn_implementation = "kvprune_test_windows"
        with fast_audio_encoder(encoder):
            other = encoder(**inputs).last_hidden_state
    assert seen == [1] * OMNI_LAYERS * len(window_tokens(frames))
    assert torch.equal(stock, other)


# -- Phi-4-multimodal: streaming mask on the device ----------------------------------------------------
@pytest.mark.parametrize("seq_len", [1, 5, 17, 100])
def test_phi4_chunk_mask_equals_adaptive_enc_mask(seq_len):
    for chunk_size, left_chunk in itertools.product([-1, 1, 3, 7, 17, 18, 200], [0, 1, 2, 18]):
        stock = modeling_phi4_multimodal.adaptive_enc_mask(seq_len, np.arange(0, seq_len, chunk_size), left_window=left_chunk)
        assert torch.equal(chunk_mask(seq_len, chunk_size, left_chunk, "cpu"), stock), (chunk_size, left_chunk)


PHI4_FEATURES = {  # (batch, frames); time reduction 8, so more than 4000 frames are cut into 500-frame chunks
    "short, batch of 2": (2, 600),
    "longer than one 500-frame chunk": (1, 4800),  # batch 1: the stock unfold fails on a batch of long clips
}


@pytest.mark.parametrize("padded", [False, True], ids=["no mask", "padding mask"])
@pytest.mark.parametrize("shape", PHI4_FEATURES.values(), ids=PHI4_FEATURES.keys())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("attn", ATTENTION)
def test_phi4_encoder_bit_identical(attn, dtype, shape, padded, monkeypatch):
    built = []
    stock_builder = modeling_phi4_multimodal.adaptive_enc_mask
    monkeypatch.setattr(
        modeling_phi4_multimodal, "adaptive_enc_mask", lambda *a, **k: built.append(a[0]) or stock_builder(*a, **k)
    )
    encoder = encoder_of(FAMILIES["phi4_multimodal"].build(attn), "Phi4MultimodalAudioModel").to(dtype)
    batch, frames = shape
    torch.manual_seed(2)
    features = torch.randn(batch, frames, N_MELS, dtype=dtype)
    mask = torch.ones(batch, frames, dtype=torch.bool)
    mask[-1, frames // 2 :] = False
    with torch.no_grad():
        stock = encoder(features, mask if padded else None)
        stock_masks = len(built)
        with fast_audio_encoder(encoder):
            fast = encoder(features, mask if padded else None)
    assert torch.equal(stock, fast)
    assert stock_masks >= 1 and len(built) == stock_masks  # the fast path never builds it on the host


def test_phi4_training_mode_keeps_the_stock_mask(monkeypatch):
    """Training draws random chunk starts inside the stock method, so it stays in charge there."""
    built = []
    stock_builder = modeling_phi4_multimodal.adaptive_enc_mask
    monkeypatch.setattr(
        modeling_phi4_multimodal, "adaptive_enc_mask", lambda *a, **k: built.append(a[0]) or stock_builder(*a, **k)
    )
    encoder = encoder_of(model("phi4_multimodal", "sdpa"), "Phi4MultimodalAudioModel")
    with fast_audio_encoder(encoder):
        encoder._streaming_mask(10, 1, 4, 1)
        encoder.train()
        try:
            encoder._streaming_mask(10, 1, 4, 1)
        finally:
            encoder.eval()
    assert built == [10]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_phi4_encoder_replays_cuda_graphs_with_the_results_of_its_compiled_forward(monkeypatch):
    """The second call of a shape captures the forward, later ones replay it (also under a later installation
    of the fast path): each call's output equals the compiled forward's without graphs on the same input, a
    weight that moved is captured again, and no more than ``CAPACITY`` graphs are kept."""
    from kvprune.encoders import graphs

    captures = []
    capture = graphs._Graph.__init__
    monkeypatch.setattr(graphs._Graph, "__init__", lambda self, *a: captures.append(a[0]) or capture(self, *a))
    encoder = encoder_of(FAMILIES["phi4_multimodal"].build("sdpa"), "Phi4MultimodalAudioModel").to("cuda", torch.bfloat16)
    torch.manual_seed(5)
    calls = [torch.randn(1, 4800, N_MELS, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    mask = torch.ones(2, 600, dtype=torch.bool, device="cuda")
    mask[-1, 300:] = False
    padded = [(torch.randn(2, 600, N_MELS, device="cuda", dtype=torch.bfloat16), mask) for _ in range(3)]
    later = [(calls[3], None), *padded, (calls[0], None)]

    def run(capacity: int) -> tuple[list[torch.Tensor], int]:
        monkeypatch.setattr(graphs, "CAPACITY", capacity)
        with torch.no_grad():
            with fast_audio_encoder(encoder):
                outputs = [encoder(x, None) for x in calls[:2]]
            with fast_audio_encoder(encoder):  # installed again: the graph of the first one replays
                outputs.append(encoder(calls[2], None))
                before_move = len(captures)
                weight = encoder.encoders[0].self_attn.q_proj.weight
                weight.data = weight.data.clone()  # the same values at another address: captured again
                return outputs + [encoder(x, m) for x, m in later], before_move

    without, _ = run(0)
    assert captures == []
    graphed, before_move = run(1)
    assert before_move == 1
    assert len(captures) == 4  # the long clip, again after the weight moved, the padded batch, the long clip again
    for index, (plain, replayed) in enumerate(zip(without, graphed)):
        assert torch.equal(plain, replayed), index
    assert not torch.equal(graphed[1], graphed[2])  # a replay reads its call's input


class DeviceSizes(torch.Tensor):
    """Clip sizes that record being read to the host (``.cpu()``), as they would be from a GPU."""

    moved: list = []

    def cpu(self, *args, **kwargs):
        DeviceSizes.moved.append(self.tolist())
        return self.as_subclass(torch.Tensor)


def test_phi4_clip_sizes_are_read_to_the_host_before_the_audio_embedding_runs():
    """Stock cuts each clip's embeddings to its size after the encoder, a host read that waits for the whole
    encoder on a GPU; the fast path hands the sizes over from the host first, with the same outputs."""
    tiny = model("phi4_multimodal", "sdpa")
    inputs = FAMILIES["phi4_multimodal"].inputs(MODEL_ROWS["phi4_multimodal"], seed=3)
    with torch.no_grad():
        stock = tiny(**inputs).logits
        DeviceSizes.moved = []
        with fast_audio_encoder(tiny) as fast:
            fast_logits = tiny(**dict(inputs, audio_embed_sizes=inputs["audio_embed_sizes"].as_subclass(DeviceSizes))).logits
    assert DeviceSizes.moved == [inputs["audio_embed_sizes"].tolist()]
    assert torch.equal(stock, fast_logits)
    assert any("(Phi4MultimodalAudioEmbedding): each clip's token count read to the host" in c for c in fast.changes)


# -- whole models under a press ----------------------------------------------------------------------
MODEL_ROWS = {
    "qwen2_5_omni": [[("text", 3), ("audio", 12), ("text", 4)], [("text", 2), ("audio", 7), ("text", 5), ("audio", 5), ("text", 2)]],
    "phi4_multimodal": [[("text", 3), ("audio", 12), ("text", 4)], [("text", 2), ("audio", 7), ("text", 5), ("audio", 5), ("text", 2)]],
    "phi4_multimodal, over 500 audio tokens": [[("text", 3), ("audio", 520), ("text", 4)]],
    "aero": [[("text", 3), ("audio", 40), ("text", 4)], [("text", 2), ("audio", 7), ("text", 5), ("audio", 5), ("text", 2)]],
    "audioflamingo3": [[("text", 3), ("audio", 40), ("text", 4)], [("text", 2), ("audio", 7), ("text", 5)]],
    "voxtral": [[("text", 3), ("audio", 12), ("text", 4)], [("text", 2), ("audio", 8), ("text", 5), ("audio", 4), ("text", 2)]],
    "granite_speech": [[("text", 3), ("audio", 12), ("text", 4)], [("text", 2), ("audio", 7), ("text", 5), ("audio", 5), ("text", 2)]],
}


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("case", MODEL_ROWS)
def test_model_under_press_bit_identical(case, attn, one_thread):
    family = case.split(",")[0]
    tiny = model(family, attn)
    inputs = FAMILIES[family].inputs(MODEL_ROWS[case], seed=3)
    press = FastVPress(layer=2)
    outputs = {}
    for variant in ("stock", "fast"):
        with fast_audio_encoder(tiny) if variant == "fast" else contextlib.nullcontext(), press(tiny, ratio=0.5) as outcome:
            with torch.no_grad():
                logits = tiny(**inputs).logits
            tokens = tiny.generate(**inputs, max_new_tokens=4, **GREEDY)
        outputs[variant] = logits, tokens, [p.clone() for p in outcome.kept_positions]
    (stock_logits, stock_tokens, stock_kept), (fast_logits, fast_tokens, fast_kept) = outputs["stock"], outputs["fast"]
    assert torch.equal(stock_logits, fast_logits)
    assert torch.equal(stock_tokens, fast_tokens)
    assert all(torch.equal(a, b) for a, b in zip(stock_kept, fast_kept, strict=True))


# -- the handle -------------------------------------------------------------------------------------
def test_changes_name_the_encoder_and_exit_restores_even_on_error():
    tiny = model("qwen2_5_omni", "sdpa")
    with pytest.raises(RuntimeError, match="body failed"):
        with fast_audio_encoder(tiny) as fast:
            assert len(fast.changes) == 1 and "audio_tower (Qwen2_5OmniAudioEncoder): attention" in fast.changes[0]
            assert fast.unchanged == ()
            assert replaced(tiny)[0].endswith("audio_tower")  # its output lengths, handed over from the host
            assert replaced(tiny)[1:] and all(name.endswith("self_attn") for name in replaced(tiny)[1:])
            raise RuntimeError("body failed")
    assert replaced(tiny) == []


def test_nested_and_repeated_handles_share_one_install():
    tiny = model("phi4_multimodal", "sdpa")
    encoder = encoder_of(tiny, "Phi4MultimodalAudioModel")
    outer = fast_audio_encoder(tiny)
    installed = encoder._streaming_mask
    with fast_audio_encoder(tiny):
        assert encoder._streaming_mask is installed  # not wrapped twice
    assert replaced(tiny) != []  # the outer handle still holds it
    outer.remove()
    outer.remove()  # a second remove changes nothing
    assert replaced(tiny) == []


def test_an_attribute_set_before_is_restored():
    encoder = omni_encoder("sdpa")
    attention = encoder_of(encoder, "Qwen2_5OmniAudioAttention")
    own = attention.forward  # e.g. a wrapper another library put on the instance
    attention.forward = own
    with fast_audio_encoder(encoder):
        assert attention.forward is not own
    assert attention.__dict__["forward"] is own


def test_unsupported_model_is_refused_with_the_supported_families():
    with pytest.raises(UnsupportedModelError, match="Supported model families: .*Qwen2.5-Omni"):
        fast_audio_encoder(torch.nn.Linear(2, 2))


# -- the GPU measurement script, at tiny shapes on the CPU -------------------------------------------
def test_bench_encoders_script_runs_tiny(tmp_path, one_thread, monkeypatch):
    script = load_script("bench_encoders", monkeypatch)  # its dataclasses look their module up
    script.main(["--tiny", "--out", str(tmp_path), "--seconds", "5,45", "--warmup", "0", "--repeats", "1"])
    with open(tmp_path / "encoders.csv") as file:
        rows = list(csv.DictReader(file))
    assert [(r["encoder"], float(r["seconds"]), r["variant"]) for r in rows] == [
        (e.preset, s, "fast") for e in script.ENCODERS for s in (5.0, 45.0)
    ], "on a CPU nothing compiles: one variant"
    assert not any(r.get("error") for r in rows), [r.get("error") for r in rows]
    assert all(r["bit_identical"] == "True" and float(r["max_abs_diff"]) == float(r["max_rel_diff"]) == 0.0 for r in rows)
    assert all(not r["changes"].startswith("none") for r in rows)
    assert all(int(r["flops"]) > 0 and float(r["tflop"]) == int(r["flops"]) / 1e12 and float(r["gemm_tflops"]) > 0 for r in rows)
    assert all(float(r["fast_vs_floor"]) == pytest.approx(float(r["fast_ms"]) / float(r["floor_ms"]), rel=1e-2) for r in rows)
    assert "| qwen2.5-omni-7b | 45 | fast |" in (tmp_path / "encoders.md").read_text()


def test_bench_encoders_script_records_a_failure_and_goes_on(tmp_path, one_thread, monkeypatch):
    script = load_script("bench_encoders", monkeypatch)
    compare = script.compare

    def failing_for_phi4(module, inputs, meter, compile):
        if type(module).__name__ == "Phi4MultimodalAudioModel":
            raise torch.OutOfMemoryError("CUDA out of memory (forged)")
        return compare(module, inputs, meter, compile)

    monkeypatch.setattr(script, "compare", failing_for_phi4)
    script.main(["--tiny", "--out", str(tmp_path), "--seconds", "5", "--warmup", "0", "--repeats", "1",
                 "--encoders", "phi4-mm,aero-1-audio-1.5b", "--variants", "fast,eager"])
    with open(tmp_path / "encoders.csv") as file:
        rows = {(r["encoder"], r["variant"]): r for r in csv.DictReader(file)}
    assert list(rows) == [(e, v) for v in ("fast", "eager") for e in ("phi4-mm", "aero-1-audio-1.5b")]
    assert all(rows["phi4-mm", v]["error"] == "OutOfMemoryError: CUDA out of memory (forged)" for v in ("fast", "eager"))
    assert all(not rows["aero-1-audio-1.5b", v]["error"] and rows["aero-1-audio-1.5b", v]["bit_identical"] == "True"
               for v in ("fast", "eager"))
