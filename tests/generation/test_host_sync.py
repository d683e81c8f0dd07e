"""Nothing the engine does between the first decoder layer of a prefill and its first decoding step waits
for the device: on a GPU, a host synchronisation there idles the GPU while the host launches every later
layer's kernels, and the pruned prefill's layers are short enough for the launches to show.

On the CPU, every read of a tensor's value as a Python number (``.item()``, ``bool(t)``, ``int(t)``,
``if t:``) is caught at the dispatcher. Other synchronisations cannot be told apart there: ``nonzero`` of a
host tensor is the engine's bookkeeping, of a device tensor a stall, and a copy from the host that waits for
the device (``torch.tensor(values, device="cuda")``) exists only on a GPU. The CUDA test makes every
synchronisation an error (``torch.cuda.set_sync_debug_mode``); CI has no GPU, so it runs where one is.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kvprune import DARTPress, FastVPress, FramePress, Generator, RandomPress, fast_audio_encoder
from kvprune.generation import GenerationObserver
from kvprune.models import resolve_family
from tests.support.helpers import decoder_layers, model
from tests.support.tiny_models import FAMILIES

from .test_generation import NO_STOP, ROWS

pytestmark = pytest.mark.usefixtures("one_thread")

#: operators that read a tensor's value as a Python number (on CUDA each waits for the stream's queue)
HOST_READS = {"_local_scalar_dense", "is_nonzero", "equal", "item"}
TOKEN_PRESSES = {
    "fastv": FastVPress(layer=2, ratio=0.9),
    "dart": DARTPress(layer=2, ratio=0.6),
    "frame": FramePress(layer=2, ratio=0.5),
    "random": RandomPress(layer=2, ratio=0.5),
}


class HostReads(TorchDispatchMode):
    """Records every operator of ``HOST_READS`` called while it is active."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in HOST_READS:
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


class UntilDecoding(GenerationObserver):
    """Calls ``on_stop`` when the engine's decoding starts."""

    def __init__(self, on_stop):
        self.on_stop = on_stop

    def decoding_started(self) -> None:
        self.on_stop()


@contextmanager
def from_hook(start_hook, on_start):
    """Calls ``on_start`` when ``start_hook(callback)`` calls back (once the prefill reaches a module)."""
    handle = start_hook(lambda *_: on_start())
    try:
        yield
    finally:
        handle.remove()


def first_layer(m):
    """The start hook of the window from the prefill's decoder layer 0."""
    return decoder_layers(m)[0].register_forward_pre_hook


def encoder_end(m):
    """The start hook of the window from the end of the audio encoder (its last module's output)."""
    return resolve_family(m).audio_encoder(m)[1].register_forward_hook


def _generate(m, inputs, press, on_start, on_stop, start_at=first_layer) -> None:
    generator = Generator(m)
    generator.generate(inputs, max_new_tokens=2, press=press, **NO_STOP)  # stop tensors, decode state: made once
    started = []

    def start():
        if not started:  # layer 0 runs in every decoding step too
            started.append(True)
            on_start()

    with from_hook(start_at(m), start):
        generator.generate(inputs, max_new_tokens=4, press=press, observer=UntilDecoding(on_stop), **NO_STOP)
    assert started, "the prefill never reached the window's first module"


WINDOWS = {  # where the window starts, and the rows: a padded batch, or one prompt (no padding)
    "from the first layer, padded": (first_layer, ROWS),
    "from the audio encoder's end, unpadded": (encoder_end, ROWS[:1]),
}


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("press_name", ["none", *TOKEN_PRESSES])
def test_prefill_reads_nothing_back_from_the_device(press_name, window):
    start_at, rows = WINDOWS[window]
    m = model("qwen2_5_omni", "sdpa")
    inputs = FAMILIES["qwen2_5_omni"].inputs(rows)
    mode = HostReads()
    with fast_audio_encoder(m):
        _generate(m, inputs, TOKEN_PRESSES.get(press_name), mode.__enter__, lambda: mode.__exit__(None, None, None), start_at)
    assert mode.seen == []


def test_the_recorder_sees_a_host_read():
    """The instrument itself: a ``.item()`` inside a layer is caught."""
    m = model("qwen2_5_omni", "sdpa")
    inputs = FAMILIES["qwen2_5_omni"].inputs(ROWS)
    mode = HostReads()
    layer = decoder_layers(m)[3]
    handle = layer.register_forward_pre_hook(lambda _, args: args[0].sum().item() and None)
    try:
        _generate(m, inputs, TOKEN_PRESSES["fastv"], mode.__enter__, lambda: mode.__exit__(None, None, None))
    finally:
        handle.remove()
    assert any("_local_scalar_dense" in op for op in mode.seen)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="host synchronisations exist on a GPU only")


def _on_cuda(rows, press_name, start_at, family: str = "qwen2_5_omni") -> None:
    m = FAMILIES[family].build("sdpa").cuda()
    inputs = {k: v.cuda() for k, v in FAMILIES[family].inputs(rows).items()}
    try:
        with fast_audio_encoder(m):
            _generate(m, inputs, TOKEN_PRESSES.get(press_name), lambda: torch.cuda.set_sync_debug_mode("error"),
                      lambda: torch.cuda.set_sync_debug_mode("default"), start_at)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@needs_cuda
@pytest.mark.parametrize("press_name", ["none", *TOKEN_PRESSES])
def test_prefill_never_synchronises_from_the_first_layer_on_cuda(press_name):
    """A padded batch: HF's mask builder reads the padding mask before layer 0; from there on, nothing."""
    _on_cuda(ROWS, press_name, first_layer)


@needs_cuda
@pytest.mark.parametrize("press_name", ["none", *TOKEN_PRESSES])
def test_prefill_never_synchronises_after_the_audio_encoder_on_cuda(press_name):
    """One prompt without padding, with the fast encoder: once the audio encoder is queued, the host never
    waits for the GPU again before decoding, so it stays ahead of it through every decoder layer."""
    _on_cuda(ROWS[:1], press_name, encoder_end)


@needs_cuda
@pytest.mark.parametrize("family", ["voxtral", "aero", "phi4_multimodal", "audioflamingo3", "granite_speech"])
@pytest.mark.parametrize("press_name", ["none", "fastv"])
def test_the_other_families_never_synchronise_after_the_audio_encoder_on_cuda(press_name, family):
    """The same for the three other families the project names and two more (their merges waited for the encoder
    until ``encoders.merge``; the CPU's view of theirs: ``tests/models/test_audio_merge.py``)."""
    _on_cuda(ROWS[:1], press_name, encoder_end, family)


@pytest.mark.parametrize("press_name", ["fastv", "dart"])
def test_the_press_sets_up_its_prefill_once_the_audio_encoder_is_queued(press_name, monkeypatch):
    """The press's bookkeeping on the prompt (clips, evidence, slots) runs after the audio encoder was called,
    so that on a GPU the host does it while the encoder runs, not while the GPU waits."""
    from kvprune.engine import PressSession

    m = model("qwen2_5_omni", "sdpa")
    inputs = FAMILIES["qwen2_5_omni"].inputs(ROWS)
    order = []
    start_prefill = PressSession._start_prefill

    def recorded(self, prompt):
        order.append("press set-up")
        return start_prefill(self, prompt)

    monkeypatch.setattr(PressSession, "_start_prefill", recorded)
    handle = resolve_family(m).audio_encoder(m)[1].register_forward_hook(lambda *_: order.append("audio encoder"))
    try:
        out = Generator(m).generate(inputs, max_new_tokens=2, press=TOKEN_PRESSES[press_name], **NO_STOP)
    finally:
        handle.remove()
    assert order == ["audio encoder", "press set-up"]
    assert all(s.kept_tokens < s.audio_tokens for s in out.outcome.stats)

