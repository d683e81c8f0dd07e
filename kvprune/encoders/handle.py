"""``fast_audio_encoder(model)``: find a model's audio encoder and install its fast path.

Encoders are recognised by class, so the same call serves a whole model of any supported family
(however a transformers version nests its encoder) and a bare encoder module. So are the model classes
whose merge of the encoder's output waits for the encoder on the host (``merge``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch.nn as nn

from ..models import resolve_family
from . import granite, merge, omni, phi4, whisper


@dataclass(frozen=True)
class EncoderKind:
    """What the fast path does to one audio encoder class: ``install(encoder, compile)`` returns the
    releases of what it replaced (``compile``: whether its pieces run compiled, None: on CUDA);
    ``None`` means the encoder stays stock, for the reason given."""

    install: Callable[[nn.Module, bool | None], list[Callable[[], None]]] | None
    description: str
    fits: Callable[[nn.Module], bool] = lambda module: True  # False: this module's version differs; left stock


ENCODER_KINDS: dict[str, EncoderKind] = {
    "Qwen2_5OmniAudioEncoder": EncoderKind(omni.install, omni.CHANGE),
    "Phi4MultimodalAudioModel": EncoderKind(phi4.install, phi4.CHANGE),
    "Phi4MultimodalAudioEmbedding": EncoderKind(phi4.install_sizes, phi4.SIZES_CHANGE),  # the module around it
    "GraniteSpeechCTCEncoder": EncoderKind(granite.install, granite.CHANGE),
    # one Whisper-style forward, each class's differences declared in whisper.STYLES
    **{name: EncoderKind(whisper.installer(style), whisper.CHANGE) for name, style in whisper.STYLES.items()},
    **{name: EncoderKind(merge.install, merge.change(name), merge.fits) for name in merge.MODEL_CLASSES},
}


class FastAudioEncoder:
    """The fast path installed on one model's audio encoder. ``remove()`` (or the end of a ``with``
    block) restores the stock path once no other handle on the same encoder still holds it.

    ``changes``: what was replaced, one line per encoder (``"path (class): change"``).
    ``unchanged``: encoders left stock, and why.
    """

    def __init__(self, changes: tuple[str, ...], unchanged: tuple[str, ...], releases: list[Callable[[], None]]):
        self.changes = changes
        self.unchanged = unchanged
        self._releases = releases

    def remove(self) -> None:
        for release in reversed(self._releases):
            release()
        self._releases = []

    def __enter__(self) -> "FastAudioEncoder":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"FastAudioEncoder(changes={list(self.changes)}, unchanged={list(self.unchanged)})"


def fast_audio_encoder(model: nn.Module, compile: bool | None = None) -> FastAudioEncoder:
    """Install the fast path on the audio encoder of ``model`` (a model of a supported family, or the
    encoder itself) and return its handle; also a context manager::

        with kvprune.fast_audio_encoder(model) as fast:
            model.generate(**inputs)
        fast.changes   # what was replaced

    Outputs are the stock encoder's: bit-identical where nothing is compiled; where a piece runs
    compiled (``compile``; None: on CUDA), within the rounding of the dtype (fused kernels sum in
    another order). Calling it again, nested or not, is safe: the first install serves all.
    """
    root = model if type(model).__name__ in ENCODER_KINDS else resolve_family(model).entry(model)
    changes, unchanged, releases = [], [], []
    for path, module in root.named_modules():
        kind = ENCODER_KINDS.get(type(module).__name__)
        if kind is None:
            continue
        label = f"{path} ({type(module).__name__})" if path else type(module).__name__
        if kind.install is None:
            unchanged.append(f"{label}: {kind.description}")
        elif not kind.fits(module):
            unchanged.append(f"{label}: left stock: not the form kvprune replaces (another transformers version)")
        else:
            releases += kind.install(module, compile)
            changes.append(f"{label}: {kind.description}")
    if not changes and not unchanged:
        unchanged.append(f"{type(root).__name__}: no audio encoder of a known class ({', '.join(ENCODER_KINDS)}); left stock")
    return FastAudioEncoder(tuple(changes), tuple(unchanged), releases)
