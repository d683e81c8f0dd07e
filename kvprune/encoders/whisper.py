"""Whisper-style audio encoders: Qwen2-Audio's (which Aero-1 shares), Voxtral's and Audio Flamingo 3's,
one fast forward for the three.

They hold the same encoder: two GELU convolutions over the mel frames of 30 s windows, learned
positions, pre-norm layers (LayerNorm, self-attention, residual; LayerNorm, fc1, GELU, fc2, residual)
and a final LayerNorm, which Qwen2-Audio and Audio Flamingo 3 precede with an average pool. What
differs between the classes is declared per class (``WhisperStyle``, ``STYLES``): the pool, the
argument that carries padding, the output type.

Stock, the windows of a call already run as one batch, and where nothing is padded (30 s windows
filled with audio) the attention gets no mask, so SDPA takes a fused kernel. What costs is around
it: each layer copies q, k and v into contiguous head-major tensors and scales q in passes of their
own, and every LayerNorm, GELU, bias and residual addition is another pass over the activations.
Audio Flamingo 3's encoder also reads its padding mask back to the host after the convolutions are
queued, to decide whether to pass it.

The fast forward runs the same operations in the same order on the same weights: q, k and v are
views of their projections (SDPA reads strides as given), and on a GPU each layer is one compiled
function (``compiled.Piece``: the elementwise work fused around the matrix products; one compilation
for every layer, the number of windows dynamic), as are the convolution stem and the tail. Padding
masks what stock masks: Qwen2-Audio's mask as the model built it (None without padding), Audio
Flamingo 3's built the stock way before anything is queued, so that its one host read waits for
nothing of the encoder's; a boolean mask is turned once per call into the additive one SDPA makes of
it in every layer, in aligned rows (which SDPA's memory-efficient kernel would copy it into, again in
every layer). Without padding no mask is passed, so SDPA takes a fused kernel (flash, cuDNN).
The output lengths the model reads on the host after the encoder (Aero-1 cuts each chunk to its
length, Qwen2-Audio moves them) come from the host, as for Qwen2.5-Omni (``lengths.py``); Audio Flamingo 3's
model cuts its frames by lengths it reads before the encoder (``merge.py``).
Uncompiled (on a CPU by default) the output is bit-identical to stock; compiled, fused kernels round
in another order (within bf16 rounding).
Training, another attention implementation than sdpa, an activation ``compiled.ACTIVATIONS`` lacks,
or a request for hidden states or attentions take the stock forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPooling

from .compiled import ACTIVATIONS, Norm, Piece, additive_mask, layer_norm, linear, norm
from .lengths import host_output_lengths
from .overrides import acquire

CHANGE = (
    "layers: q, k and v as views of their projections (no head-major copies), each layer one compiled function "
    "(LayerNorm, scaling, bias, GELU and residual fused around the matrix products; the number of windows dynamic) "
    "on a GPU, as are the convolution stem and the final norm; a padding mask (only where something is padded) made "
    "additive once per call in aligned rows, Audio Flamingo 3's built before the encoder is queued; the output lengths "
    "the model reads after the encoder handed over from the host (Qwen2-Audio's, Aero-1's)"
)


@dataclass(frozen=True)
class WhisperStyle:
    """What one Whisper-style encoder class does differently from the others."""

    padding: str  # the forward's argument that carries padding: a 4D attention mask, or a 2D mask over mel frames
    pools: bool  # an average pool over pairs of frames before the final LayerNorm
    output: type  # the ModelOutput class its forward returns
    host_lengths: bool = False  # its model reads the output lengths on the host after the encoder (``lengths.py``)


STYLES = {
    # the model builds the 4D mask itself (None without padding)
    "Qwen2AudioEncoder": WhisperStyle("attention_mask", pools=True, output=BaseModelOutput, host_lengths=True),
    # the model never passes padding: its chunks are padded with silence and attended whole
    "VoxtralEncoder": WhisperStyle("attention_mask", pools=False, output=BaseModelOutputWithPooling),
    # its model's cut of the frames reads the lengths before the encoder (``merge.CutFrames``)
    "AudioFlamingo3Encoder": WhisperStyle("input_features_mask", pools=True, output=BaseModelOutputWithPooling),
}


class LayerWeights(NamedTuple):
    """One encoder layer's parameters, (weight, bias) per linear layer."""

    attention_norm: Norm
    q: tuple
    k: tuple
    v: tuple
    out: tuple
    final_norm: Norm
    fc1: tuple
    fc2: tuple

    @classmethod
    def of(cls, layer: nn.Module) -> "LayerWeights":
        attention = layer.self_attn
        return cls(norm(layer.self_attn_layer_norm),
                   *(linear(p) for p in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj)),
                   norm(layer.final_layer_norm), linear(layer.fc1), linear(layer.fc2))


def encoder_layer(hidden: torch.Tensor, mask: torch.Tensor | None, w: LayerWeights, heads: int, scaling: float,
                  activation: str) -> torch.Tensor:
    """One encoder layer, as the stock layer computes it (its q scaled before the attention, which
    then scales by 1), with q, k and v as (batch, heads, frames, head_dim) views."""
    batch, frames, width = hidden.shape
    x = layer_norm(hidden, w.attention_norm)
    q = (F.linear(x, *w.q) * scaling).view(batch, frames, heads, -1).transpose(1, 2)
    k, v = [F.linear(x, *p).view(batch, frames, heads, -1).transpose(1, 2) for p in (w.k, w.v)]
    attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
    hidden = hidden + F.linear(attended.transpose(1, 2).reshape(batch, frames, width), *w.out)
    x = layer_norm(hidden, w.final_norm)
    hidden = hidden + F.linear(ACTIVATIONS[activation](F.linear(x, *w.fc1)), *w.fc2)
    if hidden.dtype == torch.float16:
        bound = torch.finfo(hidden.dtype).max - 1000
        hidden = torch.clamp(hidden, min=-bound, max=bound)
    return hidden


def stem(features: torch.Tensor, conv1_weight, conv1_bias, conv2_weight, conv2_bias, positions, *,
         conv1: tuple[int, int], conv2: tuple[int, int]) -> torch.Tensor:
    """The two GELU convolutions ((stride, padding) each) and the positions, (windows, frames, width)."""
    x = F.gelu(F.conv1d(features, conv1_weight, conv1_bias, stride=conv1[0], padding=conv1[1]))
    x = F.gelu(F.conv1d(x, conv2_weight, conv2_bias, stride=conv2[0], padding=conv2[1])).permute(0, 2, 1)
    return (x + positions).to(x.dtype)  # Voxtral keeps its positions in float32


def tail(hidden: torch.Tensor, weights: Norm, pool: int) -> torch.Tensor:
    """The average pool over ``pool`` frames (none: 0) and the final LayerNorm."""
    if pool:
        hidden = F.avg_pool1d(hidden.permute(0, 2, 1), pool, pool).permute(0, 2, 1)
    return layer_norm(hidden, weights)


LAYER, STEM, TAIL = Piece(encoder_layer, "layer"), Piece(stem, "convolution stem"), Piece(tail, "final norm")


def _conv(conv: nn.Conv1d) -> tuple[int, int]:
    return conv.stride[0], conv.padding[0]


def _pool(encoder: nn.Module, style: WhisperStyle) -> int:
    if not style.pools:
        return 0
    pooler = encoder.avg_pooler
    size = pooler.kernel_size[0] if isinstance(pooler.kernel_size, tuple) else pooler.kernel_size
    return int(size)


def _padding_mask(encoder: nn.Module, style: WhisperStyle, padding, features: torch.Tensor, dtype) -> torch.Tensor | None:
    """The attention mask the stock forward passes its layers: Qwen2-Audio's and Voxtral's as given;
    Audio Flamingo 3's built from its mask over mel frames as the stock forward builds it (None where
    nothing is padded)."""
    if style.padding == "attention_mask" or padding is None:
        return padding
    frames = (features.shape[-1] - 1) // 2 + 1  # after the stride-2 convolution
    lengths = (padding.sum(-1) - 1) // 2 + 1
    frame_mask = torch.arange(frames, device=features.device) < lengths[:, None]
    shape_only = torch.empty(features.shape[0], frames, 1, dtype=dtype, device=features.device)
    return create_bidirectional_mask(config=encoder.config, inputs_embeds=shape_only, attention_mask=frame_mask)


def takes_fast_path(encoder: nn.Module, args: tuple, kwargs: dict) -> bool:
    """Whether a call computes what the fast forward computes: inference, sdpa, an activation it knows,
    nothing asked of the layers beyond their output."""
    layers = encoder.layers
    return (
        not encoder.training
        and len(args) <= 1
        and not any(value for name, value in kwargs.items() if name != "return_dict")
        and len(layers) > 0
        and layers[0].self_attn.config._attn_implementation == "sdpa"
        and encoder.config.activation_function in ACTIVATIONS
    )


def fast_forward(encoder: nn.Module, style: WhisperStyle, compile: bool | None):
    """The forward of one Whisper-style encoder, fast where ``takes_fast_path``, else the stock one;
    compiled if ``compile`` (None: on CUDA)."""
    stock = encoder.forward

    def forward(input_features: torch.Tensor, *args, **kwargs):
        if not takes_fast_path(encoder, args, {k: v for k, v in kwargs.items() if k != style.padding}):
            return stock(input_features, *args, **kwargs)
        padding = args[0] if args else kwargs.get(style.padding)
        conv1, conv2 = encoder.conv1, encoder.conv2
        expected = encoder.config.max_source_positions * conv1.stride[0] * conv2.stride[0]
        if input_features.shape[-1] != expected:
            raise ValueError(f"{type(encoder).__name__} expects {expected} mel frames per window, not "
                             f"{input_features.shape[-1]}: pad the input features to {expected}.")
        features = input_features.to(dtype=conv1.weight.dtype, device=conv1.weight.device)
        compiled = features.is_cuda if compile is None else compile
        mask = additive_mask(_padding_mask(encoder, style, padding, features, conv1.weight.dtype), conv1.weight.dtype)
        hidden = STEM(compiled, (features,), conv1.weight, conv1.bias, conv2.weight, conv2.bias,
                      encoder.embed_positions.weight, conv1=_conv(conv1), conv2=_conv(conv2))
        for layer in encoder.layers:
            attention = layer.self_attn
            hidden = LAYER(compiled, (hidden, mask), LayerWeights.of(layer), attention.num_heads, attention.scaling,
                           encoder.config.activation_function)
        hidden = TAIL(compiled, (hidden,), norm(encoder.layer_norm), _pool(encoder, style))
        output = style.output(last_hidden_state=hidden)
        return output if kwargs.get("return_dict", encoder.config.return_dict) else output.to_tuple()

    return forward


def installer(style: WhisperStyle):
    """The install function of one Whisper-style class: its forward replaced, and where its model reads them, its
    output lengths handed over from the host (``lengths.py``); returns the releases."""

    def install(encoder: nn.Module, compile: bool | None) -> list:
        releases = [acquire(encoder, "forward", lambda module: fast_forward(module, style, compile))]
        if style.host_lengths:
            releases.append(acquire(encoder, "_get_feat_extract_output_lengths", host_output_lengths))
        return releases

    return install
