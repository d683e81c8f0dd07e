"""One decoding step, written as tensor operations on a ``DecodeState`` only (no host value is read and
no Python state changes), so that it compiles into few kernels and replays as one CUDA graph.

A step marks the column it writes as visible in each group's mask, runs the model's forward on the
state's static cache with the per-layer masks, chooses the next token (greedy, or sampled), and
records it; rows that have ended keep emitting the pad token, as ``generate`` pads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from ..engine.slots import to_device
from .attention import CACHE_LAYERS_KWARG, FUSED_KWARG, LAST_SLOTS_KWARG, MASKS_KWARG
from .decode_state import DecodeState


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedy (``do_sample=False``) or sampled with temperature, top-k and top-p."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature} is invalid: it must be > 0 (or use do_sample=False).")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k={self.top_k} is invalid: it must be >= 1.")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} is invalid: it must be in (0, 1].")


@dataclass
class Stopping:
    """Tokens that end a row, the token that pads it after, and tokens never chosen (device tensors)."""

    eos: torch.Tensor  # (n,) long, may be empty
    pad: torch.Tensor  # () long
    suppressed: torch.Tensor  # (vocab,) bool
    key: tuple = ()  # the same values on the host (eos ids, pad id, suppressed ids): read without asking the device

    @classmethod
    def on_device(cls, eos: list[int], pad: int, suppressed: list[int], vocab: int, device) -> "Stopping":
        """Built on the host and copied without waiting for the device's queue: it is made right after a
        prefill was queued, where a blocking copy would idle the GPU for the host's work that follows."""
        mask = torch.zeros(vocab, dtype=torch.bool)
        mask[list(suppressed)] = True
        return cls(
            eos=to_device(torch.tensor(eos, dtype=torch.long), device),
            pad=to_device(torch.tensor(pad, dtype=torch.long), device),
            suppressed=to_device(mask, device),
            key=(tuple(eos), int(pad), tuple(sorted(set(suppressed)))),
        )


def choose(logits: torch.Tensor, sampling: Sampling, stopping: Stopping) -> torch.Tensor:
    """Next token per row from float32 logits (B, vocab), without reading anything back to the host."""
    logits = logits.masked_fill(stopping.suppressed, float("-inf"))
    if not sampling.do_sample:
        return logits.argmax(dim=-1)
    logits = logits / sampling.temperature
    if sampling.top_k is not None:
        kth = logits.topk(min(sampling.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    if sampling.top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the tokens ranked above each one
        sorted_probs = sorted_probs.masked_fill(before >= sampling.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    # one draw per row without a host synchronisation (torch.multinomial waits for the device):
    # argmax of p / E with E ~ Exp(1) picks index i with probability p_i
    return (probs / torch.empty_like(probs).exponential_(1)).argmax(dim=-1)


def finish(token: torch.Tensor, done: torch.Tensor, stopping: Stopping) -> tuple[torch.Tensor, torch.Tensor]:
    """The token rows emit (pad once ended) and which rows have ended after it."""
    token = torch.where(done, stopping.pad, token)
    return token, done | torch.isin(token, stopping.eos)


def decode_step(module: nn.Module, state: DecodeState, sampling: Sampling, stopping: Stopping, cache_name: str,
                fused_attention: bool = True) -> None:
    """Generate one token for every row of ``state``, in place (``cache_name``: the forward's cache argument;
    ``fused_attention``: the fused decode-attention kernel where it runs, else the matmul path)."""
    for mask, columns in zip(state.masks, state.columns):  # each row's new column becomes visible in every group
        mask.scatter_(-1, columns.view(-1, 1, 1, 1).expand(-1, mask.shape[1], 1, 1), True)
    masks = state.layer_masks
    output = module(
        input_ids=state.tokens, position_ids=state.positions, attention_mask=masks[0], use_cache=True,
        **{cache_name: state.cache, MASKS_KWARG: masks, LAST_SLOTS_KWARG: state.layer_columns, FUSED_KWARG: fused_attention,
           CACHE_LAYERS_KWARG: state.cache.layers},
    )
    unwritten = [i for i, layer in enumerate(state.cache.layers) if layer.new_entries is not None]
    if unwritten:  # a check while tracing or running Python, not on the device
        raise RuntimeError(f"decoder layers {unwritten} did not pass their new keys and values to kvprune's decode "
                           "attention (their attention module drops its keyword arguments): this model cannot decode on "
                           "kvprune's engine; decode it with generate's own loop.")
    token = choose(output.logits[:, -1, :].float(), sampling, stopping)
    token, done = finish(token, state.done, stopping)
    state.done.copy_(done)
    state.out.index_copy_(1, state.step, token[:, None])
    state.tokens.copy_(token[:, None])
    state.positions.add_(1)
    torch._foreach_add_(state.columns, 1)
    state.step.add_(1)
