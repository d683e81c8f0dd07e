"""Qwen2.5-Omni's audio encoder: its attention windows, batched.

The encoder attends within windows of ``n_window`` tokens (``2 * n_window`` mel frames): each clip
is cut into full windows and one shorter last window, and the windows of all clips are packed into
one sequence that ``cu_seqlens`` delimits. Under flash attention the stock attention makes one
varlen call per layer. Under sdpa and eager it instead reads the window lengths back to the host in
every layer (``lengths.tolist()`` three times, once each to split q, k and v: a device sync each)
and makes one attention call per window: 150 calls per layer for 5 minutes of audio, each far
too small to fill a GPU.

The replacement forward reads the lengths once per encoder call (every layer receives the same
``cu_seqlens`` tensor) and runs each run of consecutive equal-length windows as ONE call of the same
attention function, on a (windows, heads, length, head_dim) view of the same projections. Each
window's attention is the same computation on the same values, only batched, so the output is
bit-identical to the stock path.

After the encoder, the model checks its output's length against ``sum(output_lengths.tolist())``, lengths
computed on the device before the encoder: ``lengths.host_output_lengths`` hands them over from the host,
so that the check waits for nothing.
"""

from __future__ import annotations

import sys

import torch
import torch.nn as nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .lengths import host_output_lengths
from .overrides import acquire

ATTENTION_CLASS = "Qwen2_5OmniAudioAttention"
BATCHED_IMPLEMENTATIONS = ("sdpa", "eager")  # those whose stock path loops over windows
CHANGE = (
    "attention: one call per run of equal-length windows instead of one per window, window lengths read "
    "once per encoder call instead of three times per layer (sdpa and eager; flash_attention_2 already makes one "
    "varlen call per layer and stays stock); the output lengths the model checks after the encoder read "
    "before it runs"
)


def equal_runs(bounds: list[int]) -> list[tuple[int, int, int]]:
    """``(start, window length, window count)`` of each run of consecutive equal-length windows,
    from the window boundaries ``[0, end_1, end_2, ...]``."""
    runs: list[tuple[int, int, int]] = []
    for start, end in zip(bounds, bounds[1:]):
        if runs and runs[-1][1] == end - start:
            first, length, count = runs[-1]
            runs[-1] = (first, length, count + 1)
        else:
            runs.append((start, end - start, 1))
    return runs


class WindowRuns:
    """The runs of one encoder call, read from the device by its first layer and reused by the
    others, which receive the very same ``cu_seqlens`` tensor."""

    def __init__(self):
        self._source: tuple[torch.Tensor, int] | None = None
        self._runs: list[tuple[int, int, int]] = []

    def of(self, cu_seqlens: torch.Tensor) -> list[tuple[int, int, int]]:
        source = self._source
        if source is None or source[0] is not cu_seqlens or source[1] != cu_seqlens._version:
            self._runs = equal_runs(cu_seqlens.tolist())
            self._source = (cu_seqlens, cu_seqlens._version)
        return self._runs


def window_batch(states: torch.Tensor, start: int, length: int, count: int, contiguous: bool) -> torch.Tensor:
    """The ``count`` windows of ``length`` from ``start`` of (seq, heads, head_dim) states, as one
    (count, heads, length, head_dim) batch: a view unless ``contiguous``."""
    batch = states[start : start + count * length].view(count, length, *states.shape[1:]).transpose(1, 2)
    return batch.contiguous() if contiguous else batch


def batched_forward(attention: nn.Module, runs: WindowRuns):
    """The forward of one ``Qwen2_5OmniAudioAttention`` with its windows batched; any other
    attention implementation goes to the forward it had."""
    stock = attention.forward
    eager = sys.modules[type(attention).__module__].eager_attention_forward

    def forward(hidden_states: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int | None = None, **kwargs):
        implementation = attention.config._attn_implementation
        if implementation not in BATCHED_IMPLEMENTATIONS:
            return stock(hidden_states, cu_seqlens, max_seqlen=max_seqlen, **kwargs)
        seq_length, heads = hidden_states.shape[0], attention.num_heads
        query, key, value = (
            projection(hidden_states).reshape(seq_length, heads, -1)
            for projection in (attention.q_proj, attention.k_proj, attention.v_proj)
        )
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager)
        # eager's matmuls on a strided batch of windows take another GEMM path (another summation order)
        # than on the stock single windows; contiguous windows take the same one. SDPA reads strides as given.
        contiguous = implementation == "eager"
        outputs = []
        for run in runs.of(cu_seqlens):
            output = attend(
                attention,
                *(window_batch(states, *run, contiguous) for states in (query, key, value)),
                attention_mask=None,
                scaling=attention.scaling,
                dropout=0.0 if not attention.training else attention.attention_dropout,
                is_causal=False,
                **kwargs,
            )[0]
            outputs.append(output.reshape(run[1] * run[2], -1))
        return attention.out_proj(torch.cat(outputs).reshape(seq_length, -1).contiguous())

    return forward


def install(encoder: nn.Module, compile: bool | None = None) -> list:
    """Batch the windows of every attention module of one ``Qwen2_5OmniAudioEncoder`` and hand its output
    lengths over from the host; returns the releases. Nothing of it is compiled (``compile`` is ignored):
    it is exact and at its bound without."""
    runs = WindowRuns()
    return [
        acquire(encoder, "_get_feat_extract_output_lengths", host_output_lengths),
        *(acquire(module, "forward", lambda attention: batched_forward(attention, runs))
          for module in encoder.modules()
          if type(module).__name__ == ATTENTION_CLASS),
    ]
