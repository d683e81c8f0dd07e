"""The fast encoders that run their layers as functions of the layers' weights (Whisper-style, Phi-4's and
Granite's conformers): the stock layers never run, the output is bit-identical to stock uncompiled, within
float32 rounding compiled (one compilation for every layer and every number of windows), and every call the
fast forward does not cover goes to the stock one."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

from kvprune import fast_audio_encoder
from kvprune.encoders import ENCODER_KINDS
from kvprune.encoders.compiled import Piece
from kvprune.generation.timing import compile_counters
from tests.support.helpers import GREEDY
from tests.support.tiny_models import FAMILIES

#: family -> (its encoder class, the class of the modules a stock forward runs once per layer)
SECOND_CHANGE = {"phi4_multimodal": "(Phi4MultimodalAudioEmbedding)", "voxtral": "(VoxtralModel): audio merge",
                 "audioflamingo3": "(AudioFlamingo3Model): audio merge", "granite_speech": "(GraniteSpeechModel): audio merge"}
ENCODERS = {
    "qwen2_audio": ("Qwen2AudioEncoder", "Qwen2AudioEncoderLayer"),
    "aero": ("Qwen2AudioEncoder", "Qwen2AudioEncoderLayer"),
    "voxtral": ("VoxtralEncoder", "VoxtralEncoderLayer"),
    "audioflamingo3": ("AudioFlamingo3Encoder", "AudioFlamingo3EncoderLayer"),
    "granite_speech": ("GraniteSpeechCTCEncoder", "GraniteSpeechConformerBlock"),
    "phi4_multimodal": ("Phi4MultimodalAudioModel", "Phi4MultimodalAudioConformerEncoderLayer"),
}
#: prompts of audio tokens per clip: whole 30 s windows only (Whisper-style tiny windows: 32 tokens, Voxtral's 4),
#: and clips whose last window is partly padding, several to a batch
CLIPS = {
    "whole windows": [[("text", 3), ("audio", 64), ("text", 2)]],
    "padded windows": [[("text", 2), ("audio", 8), ("text", 3)], [("text", 3), ("audio", 44), ("text", 2)]],
}


#: the tiny configs' encoder depth, raised where a test needs layers to share one compilation
DEEPER = {"aero": dict(audio_config=dict(encoder_layers=3)), "phi4_multimodal": dict(audio_config=dict(num_blocks=2))}


def tiny(family: str, dtype=torch.float32, deeper: bool = False):
    if not deeper:
        return FAMILIES[family].build("sdpa").to(dtype)
    declared = FAMILIES[family].family
    torch.manual_seed(0)
    return declared.build(declared.tiny_config(**DEEPER.get(family, {})), attn_implementation="sdpa").eval().to(dtype)


def stock_layers(model, family: str) -> int:
    return sum(type(m).__name__ == ENCODERS[family][1] for m in encoder_of(model, family).modules())


def encoder_of(model, family: str):
    return next(m for m in model.modules() if type(m).__name__ == ENCODERS[family][0])


@contextlib.contextmanager
def recorded(model, family: str):
    """The encoder's outputs and how many stock layers ran, while the block runs."""
    encoder = encoder_of(model, family)
    seen = dict(outputs=[], layers=0)

    def count(*_):
        seen["layers"] += 1

    def keep(module, args, output):
        seen["outputs"].append(output if isinstance(output, torch.Tensor) else output[0])

    handles = [encoder.register_forward_hook(keep)]
    handles += [m.register_forward_hook(count) for m in encoder.modules() if type(m).__name__ == ENCODERS[family][1]]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def inputs(family: str, clips: str, dtype=torch.float32) -> dict:
    features = FAMILIES[family].inputs(CLIPS[clips], seed=2)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in features.items()}


@pytest.mark.parametrize("clips", CLIPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("family", ENCODERS)
def test_bit_identical_and_no_stock_layer_runs(family, dtype, clips, one_thread):
    if family == "voxtral" and clips == "padded windows":
        pytest.skip("Voxtral pads every clip to whole windows itself: no clip is partly padding")
    model, batch = tiny(family, dtype), inputs(family, clips, dtype)
    runs = {}
    for variant in ("stock", "fast"):
        with torch.no_grad(), recorded(model, family) as seen:
            with fast_audio_encoder(model) if variant == "fast" else contextlib.nullcontext() as fast:
                logits = model(**batch).logits
        runs[variant] = logits, seen
        if fast is not None:  # Phi-4's audio embedding around its encoder too; the merge of three others
            assert len(fast.changes) == 1 + (family in SECOND_CHANGE) and fast.unchanged == ()
            assert family not in SECOND_CHANGE or any(SECOND_CHANGE[family] in change for change in fast.changes)
    (stock_logits, stock), (fast_logits, fast) = runs["stock"], runs["fast"]
    assert stock["layers"] == stock_layers(model, family) > 0
    assert fast["layers"] == 0
    assert torch.equal(stock["outputs"][0], fast["outputs"][0])
    assert torch.equal(stock_logits, fast_logits)


@pytest.mark.parametrize("family", ["voxtral", "aero", "audioflamingo3", "granite_speech"])
def test_greedy_tokens_equal_stock(family, one_thread):
    model, batch = tiny(family), inputs(family, "whole windows")
    tokens = {}
    for variant in ("stock", "fast"):
        with fast_audio_encoder(model) if variant == "fast" else contextlib.nullcontext():
            tokens[variant] = model.generate(**batch, max_new_tokens=4, **GREEDY)
    assert torch.equal(tokens["stock"], tokens["fast"])


def test_calls_it_does_not_cover_take_the_stock_forward(one_thread):
    """Eager attention, requested hidden states and training each run the stock layers."""
    family = "aero"
    model = tiny(family)
    encoder = encoder_of(model, family)
    features = inputs(family, "whole windows")["audio_values"]
    with torch.no_grad(), fast_audio_encoder(model):
        with recorded(model, family) as seen:
            hidden = encoder(features, output_hidden_states=True)
        assert seen["layers"] == len(encoder.layers) and len(hidden.hidden_states) == len(encoder.layers) + 1
        encoder.config._attn_implementation = "eager"
        try:
            with recorded(model, family) as seen:
                encoder(features)
            assert seen["layers"] == len(encoder.layers)
        finally:
            encoder.config._attn_implementation = "sdpa"
        encoder.train()
        try:
            with recorded(model, family) as seen:
                encoder(features)
            assert seen["layers"] == len(encoder.layers)
        finally:
            encoder.eval()


def test_return_dict_false_gives_the_stock_tuple():
    family = "voxtral"
    encoder = encoder_of(tiny(family), family)
    features = inputs(family, "whole windows")["input_features"]
    with torch.no_grad():
        stock = encoder(features, return_dict=False)
        with fast_audio_encoder(encoder):
            fast = encoder(features, return_dict=False)
    assert isinstance(fast, tuple) and len(fast) == len(stock) == 1 and torch.equal(stock[0], fast[0])


def test_whisper_style_input_of_the_wrong_length_is_refused():
    family = "aero"
    encoder = encoder_of(tiny(family), family)
    with fast_audio_encoder(encoder), pytest.raises(ValueError, match="expects 128 mel frames per window, not 100"):
        encoder(torch.zeros(1, encoder.config.num_mel_bins, 100))


@pytest.mark.parametrize("family", ["aero", "qwen2_audio"])
def test_whisper_style_output_lengths_come_from_the_host_with_the_stock_values(family):
    """The lengths the model reads after the encoder (Aero-1's cut per chunk, Qwen2-Audio's placeholder
    check) wait for nothing there: on a GPU they were on the host before the encoder was queued."""
    encoder = encoder_of(tiny(family), family)
    frames = torch.tensor([128, 37, 100])
    stock = encoder._get_feat_extract_output_lengths(frames)
    with fast_audio_encoder(encoder):
        assert "_get_feat_extract_output_lengths" in encoder.__dict__  # on the CPU the stock lengths are there too
        fast = encoder._get_feat_extract_output_lengths(frames)
    assert fast[1].device.type == "cpu" and all(torch.equal(a, b) for a, b in zip(stock, fast))
    assert "_get_feat_extract_output_lengths" not in encoder.__dict__


def test_audio_flamingo_3_keeps_its_encoders_stock_output_lengths():
    """Its model reads them before the encoder (``merge.CutFrames``): handed over, the stock cut would read them after."""
    encoder = encoder_of(tiny("audioflamingo3"), "audioflamingo3")
    with fast_audio_encoder(encoder):
        assert "_get_feat_extract_output_lengths" not in encoder.__dict__


def test_every_listed_class_is_an_encoder_kind():
    assert {cls for cls, _ in ENCODERS.values()} <= set(ENCODER_KINDS)


# -- compiled (on a GPU by default; here forced on the CPU) ----------------------------------------------------
def compiled_run(model, family: str, clips: str) -> int:
    """One call stock and one compiled; asserts they agree within float32 rounding; returns the graphs
    torch.compile made for the compiled call."""
    batch = inputs(family, clips)
    with torch.no_grad(), recorded(model, family) as seen:
        stock = model(**batch).logits
        before = compile_counters()[0]
        with fast_audio_encoder(model, compile=True):
            fast = model(**batch).logits
    torch.testing.assert_close(seen["outputs"][1], seen["outputs"][0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast, stock, rtol=1e-4, atol=1e-4)
    return compile_counters()[0] - before


def test_compiled_whisper_style_one_compilation_per_piece_for_every_layer_and_window_count(one_thread):
    """Three pieces (the convolution stem, a layer, the final norm) whatever the depth; another number of
    windows compiles nothing new (the batch axis is dynamic)."""
    model = tiny("aero", deeper=True)
    assert stock_layers(model, "aero") == 3
    torch._dynamo.reset()
    assert compiled_run(model, "aero", "padded windows") == 3  # 3 windows
    assert compiled_run(model, "aero", "whole windows") == 0  # 2 windows


@pytest.mark.parametrize("family", ["phi4_multimodal", "granite_speech"])
def test_compiled_conformer_one_compilation_for_every_block(family, one_thread):
    model = tiny(family, deeper=True)
    assert stock_layers(model, family) == 2
    torch._dynamo.reset()
    assert compiled_run(model, family, "padded windows") == 1


def test_a_piece_that_cannot_compile_says_so_once_and_runs_uncompiled():
    def broken(x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()  # refused under fullgraph
        return x * 2

    piece = Piece(broken, "test piece")
    x = torch.arange(4.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            first, second = piece(True, (x,)), piece(True, (x,))
    assert torch.equal(first, x * 2) and torch.equal(second, x * 2)
    assert piece.failed is not None
    assert [str(w.message) for w in caught if "test piece could not compile" in str(w.message)] == [
        f"kvprune: the fast audio encoder's test piece could not compile and runs uncompiled from now on (same math, "
        f"less fused): {piece.failed}"
    ]
