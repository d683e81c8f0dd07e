"""The fast encoders' pieces of work (a layer, a stem, a tail), compiled where that is asked for.

A piece is a plain function of tensors (the layer's weights among them, never a module), so one
compilation serves every layer of every encoder of the same shapes; the batch axis (how many
windows or chunks) is dynamic, so a new number of windows compiles nothing new (a batch of one is
compiled on its own: torch specialises that size). Compilation happens where the caller asks
(``fast_audio_encoder(compile=...)``: on CUDA by default), and never while gradients are recorded.
A piece that fails to compile says so once (a warning naming the piece and the compiler's reason; the
compiler's own logging of it is kept out) and runs uncompiled from then on, with the same math. A piece's function compiles as one graph: no
host reads, no generator expressions (older Dynamo breaks the graph on them), integer arithmetic on
lengths (they may be symbolic).

Compiled, a piece's attention takes SDPA's kernels in torch's order (flash, memory-efficient, math,
cuDNN) unless ``ATTENTION_PRIORITY`` names another (``scripts/bench_encoders.py`` times cuDNN first
beside it), and 1x1 convolutions become matrix products (Inductor's ``conv_1x1_as_mm``).
Uncompiled, a piece runs exactly the stock operations (with ``eager_attention``: the SDPA kernel
the stock code forces).
"""

from __future__ import annotations

import warnings
from contextlib import ExitStack
from typing import Callable, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compiling import compiled_or_plain, compiler_failures_unlogged, recompile_room

#: SDPA's kernels in the order a compiled piece tries them (each where it supports the inputs); None: torch's
ATTENTION_PRIORITY: tuple[str, ...] | None = None
BIAS_ALIGNMENT = 16  # entries: SDPA's memory-efficient kernel copies, in every call, a bias whose rows are not so aligned
#: Inductor's options while a piece compiles (those a torch version lacks are left out)
INDUCTOR_OPTIONS = {"conv_1x1_as_mm": True}
#: the activations a piece can compute, by their transformers name (a model naming another keeps its stock forward)
ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "swish": F.silu}


def _attention_kernels(names) -> object:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [getattr(SDPBackend, name) for name in names]
    try:
        return sdpa_kernel(backends, set_priority=True)
    except TypeError:  # a torch without priorities (before 2.6): the kernels allowed, in torch's order
        return sdpa_kernel(backends)


class Piece:
    """``fn`` run plain or compiled; ``failed`` holds the compiler's reason once it could not compile."""

    def __init__(self, fn: Callable, what: str, eager_attention: str | None = None):
        self.fn = fn
        self.what = what
        self.eager_attention = eager_attention
        self.failed: str | None = None
        self._compiled: Callable | None = None

    def __call__(self, compile: bool, batched: tuple[torch.Tensor | None, ...], *args, **named):
        """``fn(*batched, *args, **named)``: compiled if ``compile`` (and nothing failed before, and no gradient
        is recorded), the first axis of each ``batched`` tensor dynamic."""
        if not compile or self.failed is not None or torch.is_grad_enabled():
            return self._plain(*batched, *args, **named)
        if self._compiled is None:
            self._compiled = torch.compile(self.fn, fullgraph=True)
        for tensor in batched:
            if tensor is not None:
                torch._dynamo.maybe_mark_dynamic(tensor, 0)
        return compiled_or_plain(self._run_compiled, self._plain, self._failed, *batched, *args, **named)

    def _run_compiled(self, *args, **named):
        import torch._inductor.config as inductor_config

        options = {name: value for name, value in INDUCTOR_OPTIONS.items() if hasattr(inductor_config, name)}
        with recompile_room(), inductor_config.patch(**options), compiler_failures_unlogged(), ExitStack() as stack:
            if ATTENTION_PRIORITY is not None:
                stack.enter_context(_attention_kernels(ATTENTION_PRIORITY))
            return self._compiled(*args, **named)

    def _failed(self, why: str) -> None:
        self.failed = why
        warnings.warn(f"kvprune: the fast audio encoder's {self.what} could not compile and runs uncompiled from now "
                      f"on (same math, less fused): {why}", RuntimeWarning, stacklevel=4)

    def reset(self) -> None:
        """Forget a compilation failure: the next compiled call tries again (after a setting changed)."""
        self.failed = None

    def _plain(self, *args, **named):
        with ExitStack() as stack:
            if self.eager_attention is not None:
                stack.enter_context(_attention_kernels([self.eager_attention]))
            return self.fn(*args, **named)


# -- a module's weights as the pieces take them -------------------------------------------------------------------
class Norm(NamedTuple):
    """A LayerNorm's weights and epsilon."""

    weight: torch.Tensor
    bias: torch.Tensor
    eps: float


def norm(module: nn.LayerNorm) -> Norm:
    return Norm(module.weight, module.bias, module.eps)


def linear(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a linear layer or convolution."""
    return module.weight, module.bias


def normed_linears(norm_module: nn.LayerNorm, *linears: nn.Module) -> tuple:
    """A LayerNorm and the linear layers after it (a feed-forward): ``(Norm, (weight, bias), ...)``."""
    return (norm(norm_module), *(linear(module) for module in linears))


def layer_norm(x: torch.Tensor, weights: Norm) -> torch.Tensor:
    """``nn.LayerNorm`` over the last axis."""
    return F.layer_norm(x, (x.shape[-1],), weights.weight, weights.bias, weights.eps)


def aligned_bias(shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """An uninitialised attention bias of ``shape`` whose rows lie ``BIAS_ALIGNMENT`` entries apart, as SDPA's
    memory-efficient kernel reads them (it copies a bias of other rows into such ones, in every layer)."""
    length = shape[-1]
    width = -(-length // BIAS_ALIGNMENT) * BIAS_ALIGNMENT
    return torch.empty(*shape[:-1], width, dtype=dtype, device=device)[..., :length]


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean attention mask as the additive one SDPA turns it into in every call (0 where True, -inf
    where False), made once, in aligned rows; any other mask as it is."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return aligned_bias(tuple(mask.shape), dtype, mask.device).zero_().masked_fill_(~mask, float("-inf"))
