"""Granite Speech's audio encoder (a conformer CTC encoder): each conformer block one compiled function.

The stock encoder attends within blocks of ``context_size`` frames (4 s), all blocks of a call already
batched, with Shaw's relative position bias computed from the queries as the attention mask; it forces
SDPA's math kernel, which on a GPU upcasts bf16 to float32 and writes out every score matrix. Each
block is some thirty kernels: five LayerNorms, two feed-forwards, the attention, a convolution module
of pointwise, depthwise and pointwise convolutions with a GLU and a batch norm, each activation and
residual addition a pass of its own.

The fast path runs each block as one function of its weights, the same operations in the same
order, compiled on a GPU (``compiled.Piece``: the elementwise work fused around the matrix products
and convolutions, 1x1 convolutions as matrix products, and the attention on SDPA's fused kernels,
which take the bias as it is: bf16 scores, float32 accumulation), the bias written into the aligned
rows SDPA's memory-efficient kernel would otherwise copy it into. Uncompiled (on a CPU by default)
it keeps the math kernel and the output is bit-identical to stock; compiled, within bf16 rounding.
Training or a request for hidden states or attentions keep the stock forward.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .compiled import BIAS_ALIGNMENT, Norm, Piece, layer_norm, linear, norm, normed_linears
from .overrides import acquire

CHANGE = (
    "each conformer block one compiled function on a GPU (elementwise work fused, 1x1 convolutions as matrix "
    "products, the attention on SDPA's fused kernels instead of the math kernel)"
)


class BlockWeights(NamedTuple):
    """One ``GraniteSpeechConformerBlock``'s parameters."""

    ff1: tuple  # (norm, up, down)
    attention_norm: Norm
    q: torch.Tensor
    kv: torch.Tensor
    out: tuple
    rel_pos_emb: torch.Tensor
    conv_norm: Norm
    up_conv: tuple
    depth_conv: torch.Tensor
    batch_norm: tuple  # (running mean, running var, weight, bias, eps)
    down_conv: tuple
    ff2: tuple
    post_norm: Norm

    @classmethod
    def of(cls, block: nn.Module) -> "BlockWeights":
        attention, conv, bn = block.attn, block.conv, block.conv.batch_norm
        ff1, ff2 = (normed_linears(ff.pre_norm, ff.up_proj, ff.down_proj) for ff in (block.ff1, block.ff2))
        return cls(
            ff1, norm(attention.pre_norm), attention.to_q.weight, attention.to_kv.weight, linear(attention.to_out),
            attention.rel_pos_emb.weight, norm(conv.norm), linear(conv.up_conv), conv.depth_conv.conv.weight,
            (bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps), linear(conv.down_conv), ff2,
            norm(block.post_norm),
        )


def _feed_forward(x: torch.Tensor, weights: tuple) -> torch.Tensor:
    ln, up, down = weights
    return F.linear(F.silu(F.linear(layer_norm(x, ln), *up)), *down)


def _attention(hidden: torch.Tensor, w: BlockWeights, dists: torch.Tensor, heads: int, context: int,
               scale: float) -> torch.Tensor:
    """The block attention with its relative position bias, as ``GraniteSpeechConformerAttention`` computes it."""
    x = layer_norm(hidden, w.attention_norm)
    batch, frames, _ = x.shape
    blocks, remainder = -(-frames // context), frames % context  # integer ceiling: symbolic lengths stay integers
    if remainder > 0:
        x = F.pad(x, (0, 0, 0, context - remainder))
    k, v = F.linear(x, w.kv).chunk(2, dim=-1)
    q, k, v = [t.reshape(batch * blocks, context, heads, -1).transpose(1, 2) for t in (F.linear(x, w.q), k, v)]
    bias = torch.einsum("b h c d, c r d -> b h c r", q, F.embedding(dists, w.rel_pos_emb)) * scale
    bias = F.pad(bias, (0, -context % BIAS_ALIGNMENT))[..., :context]  # in aligned rows, which SDPA would copy it into
    if remainder > 0:  # the padded frames of each clip's last block
        mask = torch.ones(context, context, dtype=torch.bool, device=x.device)
        mask[:remainder, :remainder] = False
        bias[blocks - 1 : bias.shape[0] : blocks].masked_fill_(mask, -torch.finfo(bias.dtype).max)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    out = out.transpose(1, 2).reshape(batch, x.shape[1], -1)
    return F.linear(out[:, :frames, :], *w.out)


def conformer_block(hidden: torch.Tensor, w: BlockWeights, dists: torch.Tensor, *, heads: int, context: int, scale: float,
                    padding: tuple[int, int]) -> torch.Tensor:
    """One conformer block as ``GraniteSpeechConformerBlock`` computes it (``padding``: the depthwise
    convolution's, left and right)."""
    hidden = 0.5 * _feed_forward(hidden, w.ff1) + hidden
    hidden = _attention(hidden, w, dists, heads, context, scale) + hidden
    x = F.glu(F.conv1d(layer_norm(hidden, w.conv_norm).permute(0, 2, 1), *w.up_conv), dim=1)
    x = F.conv1d(F.pad(x, padding), w.depth_conv, groups=x.shape[1])
    mean, var, weight, bias, eps = w.batch_norm
    x = F.silu(F.batch_norm(x, mean, var, weight, bias, False, 0.0, eps))
    hidden = F.conv1d(x, *w.down_conv).permute(0, 2, 1) + hidden
    hidden = 0.5 * _feed_forward(hidden, w.ff2) + hidden
    return layer_norm(hidden, w.post_norm)


BLOCK = Piece(conformer_block, "conformer block", eager_attention="MATH")  # uncompiled: the kernel stock forces


def fast_forward(encoder: nn.Module, compile: bool | None):
    """The forward of one ``GraniteSpeechCTCEncoder``, with each block a ``BLOCK`` call (compiled if
    ``compile``; None: on CUDA); the stock one for training or extra outputs."""
    stock = encoder.forward

    def forward(hidden_states: torch.Tensor, **kwargs):
        if encoder.training or any(value for name, value in kwargs.items() if name != "return_dict"):
            return stock(hidden_states, **kwargs)
        hidden_states = encoder.input_linear(hidden_states)
        compiled = hidden_states.is_cuda if compile is None else compile
        for index, block in enumerate(encoder.layers, start=1):
            attention = block.attn
            padding = block.conv.depth_conv.padding
            hidden_states = BLOCK(compiled, (hidden_states,), BlockWeights.of(block), encoder.attention_dists,
                                  heads=attention.num_heads, context=attention.context_size, scale=attention.scale,
                                  padding=padding)
            if index == encoder.num_layers // 2:  # the CTC head's softmax fed back, as stock does
                hidden_states += encoder.out_mid(F.softmax(encoder.out(hidden_states.clone()), dim=-1))
        output = BaseModelOutputWithPooling(last_hidden_state=hidden_states)
        return output if kwargs.get("return_dict", encoder.config.return_dict) else output.to_tuple()

    return forward


def install(encoder: nn.Module, compile: bool | None = None) -> list:
    """Run the blocks of one ``GraniteSpeechCTCEncoder`` fast; returns the release."""
    return [acquire(encoder, "forward", lambda module: fast_forward(module, compile))]
