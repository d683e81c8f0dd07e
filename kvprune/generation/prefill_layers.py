"""The prefill's decoder layers from K on, each layer's ``forward`` compiled (dynamic shapes).

Why: on the smaller language models (Voxtral's, Aero-1's, Phi-4's), layers >= K of a pruned prefill hold a few
hundred tokens, a fraction of a millisecond of GPU work each, and the host's launch of an eager Hugging Face layer
(tens of kernels, and the Python around each) takes longer: the GPU waits for the host, and the prefill follows
the host's speed. Compiled, a layer launches a few fused kernels from one generated function.

Only the layer's ``forward`` is replaced, for the duration of a prefill: ``Module.__call__`` still runs the press's
hooks around it (the drop at K, the cache presses' compression after a layer), eagerly. A layer that a press
instruments inside for the call (an attention recorder, a hook on a submodule) runs as written. Shapes are dynamic
from the first call, so every kept length, prompt length and batch size is served by one compilation per layer
(each layer is its own: its index into the cache is a constant of its code). A compiler failure is reported once,
in one line, and the layers run as written from then on (same math, not fused)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from contextlib import ExitStack, contextmanager

import torch
import torch.nn as nn

from ..compiling import compiled_or_plain, compiler_failures_unlogged, recompile_room
from ..engine.attention_probe import RECORDER_ATTRIBUTE


class CompiledLayers:
    """Decoder layers ``layers[start:]`` of one model, each ``forward`` compiled with ``backend`` (``torch.compile``'s:
    a name or a callable) on first use."""

    def __init__(self, layers: Sequence[nn.Module], start: int, backend: str | Callable = "inductor"):
        self.layers = list(layers)[start:]
        self.start, self.backend = start, backend
        self.failed: str | None = None  # the compiler's reason, once a layer could not compile
        self._forwards: dict[int, Callable] = {}  # per layer, its compiled forward with the fallback (made once)

    @contextmanager
    def around(self):
        """While inside, the layers not instrumented by a press run compiled (unless compiling failed before)."""
        if self.failed is not None:
            yield
            return
        with ExitStack() as stack:
            stack.enter_context(recompile_room())
            stack.enter_context(compiler_failures_unlogged())
            for index, layer in enumerate(self.layers):
                if not _instrumented(layer):
                    if index not in self._forwards:
                        self._forwards[index] = self._forward(layer)
                    layer.forward = self._forwards[index]
                    stack.callback(layer.__dict__.pop, "forward", None)
            yield

    def _forward(self, layer: nn.Module) -> Callable:
        """The layer's forward: compiled, falling back to the layer's own on a compiler failure."""
        plain = type(layer).forward.__get__(layer)
        compiled = torch.compile(plain, dynamic=True, backend=self.backend)

        def forward(*args, **kwargs):
            if self.failed is not None:
                return plain(*args, **kwargs)
            return compiled_or_plain(compiled, plain, self._failed, *args, **kwargs)

        return forward

    def _failed(self, why: str) -> None:
        self.failed = why
        warnings.warn(f"kvprune: the prefill's decoder layers >= {self.start} could not compile and run uncompiled from "
                      f"now on (same math, not fused): {why}", RuntimeWarning, stacklevel=2)


def _instrumented(layer: nn.Module) -> bool:
    """Whether a press looks inside ``layer`` during this call: a hook on one of its submodules, or an attention
    recorder (the layer's own hooks run outside its forward and do not count)."""
    for module in layer.modules():
        if module is not layer and (module._forward_hooks or module._forward_pre_hooks):
            return True
        if RECORDER_ATTRIBUTE in module.__dict__:
            return True
    return False
