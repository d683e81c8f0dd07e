"""Phi-4-multimodal's audio encoder (a conformer): its masks built on the device and once, each
conformer block one compiled function.

On every call the stock encoder builds a (T, T) boolean "streaming" attention mask with
``adaptive_enc_mask`` on the host (numpy chunk starts, then comparisons and an index search over
T x T positions), expands it over the batch and copies it to the device. Audio longer than 500
frames after subsampling (40 s) is then cut into 500-frame chunks and a second mask is built the
same way, the first one being thrown away. The host work grows with T^2 and the device waits for
it (5 minutes of audio: a 3,750 x 3,750 mask). With the released configuration (``chunk_size=-1``)
the mask is all True. It then adds that mask to the relative position bias of every head: one
(chunks, heads, 500, 500) tensor, which SDPA's memory-efficient kernel copies once per layer into
rows padded to 16 entries (it reads bias rows at aligned addresses). Each conformer block is some
forty kernels: five LayerNorms, two GLU feed-forwards, the attention, a convolution module of
pointwise, depthwise and pointwise convolutions with a GLU, each bias, activation and residual
addition a pass of its own.

The fast path builds the same boolean mask from the chunk index of each position with a few tensor
operations on the encoder's device (``chunk_mask``); adds it to the bias as stock does, once, into
rows already padded (so no layer copies it), for one chunk broadcast over the others where no clip
is padded (every chunk's mask is then the same); and runs each block as one function of its weights,
compiled on a GPU (``compiled.Piece``: the elementwise work fused around the matrix products and
convolutions, 1x1 convolutions as matrix products); and, compiled, replays the whole forward from a
CUDA graph per input shape (``graphs.GraphedForward``), since its kernels are too small to keep the
GPU busy while the host launches them one by one. Uncompiled (on a CPU by default) the output is
bit-identical to stock; compiled, within bf16 rounding. Around the encoder, the audio embedding reads
each clip's token count to the host before the encoder runs instead of after (``host_embed_sizes``).
Training (which draws random chunk starts), invalid chunk settings, another attention implementation
than sdpa or an activation ``compiled.ACTIVATIONS`` lacks keep the stock methods.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .compiled import ACTIVATIONS, Norm, Piece, aligned_bias, layer_norm, linear, norm, normed_linears
from .graphs import GraphedForward
from .overrides import acquire

CHANGE = (
    "streaming mask built on the device (stock: on the host in O(T^2), then copied); the attention bias built once "
    "into aligned rows (stock: copied into padded rows by every layer's attention), one chunk's broadcast where no clip is "
    "padded; each conformer block one compiled function on a GPU (elementwise work fused, 1x1 convolutions as matrix "
    "products), the whole forward replayed from a CUDA graph per input shape"
)
CHUNK = 500  # the stock forward's chunk of frames after subsampling (its max_seq_len)


def chunk_mask(seq_len: int, chunk_size: int, left_chunk: int, device) -> torch.Tensor:
    """``adaptive_enc_mask`` for chunks of ``chunk_size`` starting at 0 (all True when it is
    negative): position i sees from the start of the chunk ``left_chunk`` chunks before its own to
    the end of its own chunk."""
    if chunk_size < 0:
        return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
    position = torch.arange(seq_len, device=device)
    chunk = position // chunk_size
    first = (chunk - left_chunk).clamp(min=0) * chunk_size
    end = ((chunk + 1) * chunk_size).clamp(max=seq_len)
    return (position[None, :] >= first[:, None]) & (position[None, :] < end[:, None])


def device_streaming_mask(encoder: nn.Module):
    """``_streaming_mask`` of one ``Phi4MultimodalAudioModel``, built where its input lives."""
    stock = encoder._streaming_mask

    def _streaming_mask(seq_len: int, batch_size: int, chunk_size: int, left_chunk: int) -> torch.Tensor:
        if encoder.training or chunk_size == 0 or left_chunk < 0:
            return stock(seq_len, batch_size, chunk_size, left_chunk)
        device = encoder.encoder_embedding.global_mean.device  # the encoder's first operation runs there
        return chunk_mask(seq_len, chunk_size, left_chunk, device).unsqueeze(0).expand(batch_size, -1, -1)

    return _streaming_mask


def attention_bias(hs_mask: torch.Tensor, relative: torch.Tensor, same_rows: bool) -> torch.Tensor:
    """``hs_mask.unsqueeze(1) + relative`` (stock's attention mask: the boolean mask added to each head's
    relative position bias), written into aligned rows (``compiled.aligned_bias``); computed for the first row
    of the batch and broadcast where ``same_rows``."""
    rows = hs_mask[:1] if same_rows else hs_mask
    shape = (rows.shape[0], *relative.shape[1:])
    out = aligned_bias(shape, torch.result_type(hs_mask, relative), relative.device)
    torch.add(rows.unsqueeze(1), relative, out=out)
    return out.expand(hs_mask.shape[0], -1, -1, -1)


class BlockWeights(NamedTuple):
    """One ``Phi4MultimodalAudioConformerEncoderLayer``'s parameters, as (weight, bias) pairs."""

    ff_in: tuple  # (norm, gate_up, down)
    attention_norm: Norm
    q: tuple
    k: tuple
    v: tuple
    o: tuple
    conv_norm: Norm
    glu: tuple  # the GLU's pointwise convolution
    glu_biases: tuple  # its b1 and b2
    depthwise: tuple
    pointwise: tuple
    ext: tuple  # the last pointwise convolution
    ff_out: tuple
    norm: Norm

    @classmethod
    def of(cls, layer: nn.Module) -> "BlockWeights":
        def feed_forward(mlp):
            return normed_linears(mlp.layer_norm, mlp.gate_up_proj, mlp.down_proj)

        attention, conv = layer.self_attn, layer.conv
        return cls(
            feed_forward(layer.feed_forward_in), norm(layer.layer_norm_att),
            *(linear(p) for p in (attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj)),
            norm(conv.layer_norm), linear(conv.glu.ext_pw_conv_1d), (conv.glu.b1, conv.glu.b2),
            linear(conv.dw_sep_conv_1d.dw_conv), linear(conv.dw_sep_conv_1d.pw_conv), linear(conv.ext_pw_conv_1d),
            feed_forward(layer.feed_forward_out), norm(layer.layer_norm),
        )


def _feed_forward(x: torch.Tensor, weights: tuple, act) -> torch.Tensor:
    ln, gate_up, down = weights
    up, gate = F.linear(layer_norm(x, ln), *gate_up).chunk(2, dim=-1)
    return F.linear(up * act(gate), *down)


def conformer_block(hidden: torch.Tensor, bias: torch.Tensor, w: BlockWeights, *, heads: int, scaling: float,
                    kernel: int, activations: tuple[str, str, str]) -> torch.Tensor:
    """One conformer block as the stock one computes it (``activations``: the feed-forwards', the GLU's and
    the convolution module's; ``kernel``: the depthwise convolution's size)."""
    act, glu_act, conv_act = [ACTIVATIONS[name] for name in activations]
    batch, frames, width = hidden.shape
    residual = hidden + 0.5 * _feed_forward(hidden, w.ff_in, act)
    x = layer_norm(residual, w.attention_norm)
    q, k, v = [F.linear(x, *p).view(batch, frames, heads, -1).transpose(1, 2) for p in (w.q, w.k, w.v)]
    attended = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scaling)
    hidden = residual + F.linear(attended.transpose(1, 2).reshape(batch, frames, -1), *w.o)
    # the convolution module, on (batch, channels, frames) as stock permutes it
    x = F.conv1d(layer_norm(hidden, w.conv_norm).permute(0, 2, 1), *w.glu)
    half = x.shape[1] // 2
    x = ((x[:, :half, :] + w.glu_biases[0]) * glu_act(x[:, half:, :] + w.glu_biases[1])).permute(0, 2, 1)
    x = F.conv1d(x.permute(0, 2, 1), *w.depthwise, padding=kernel - 1, groups=width)
    x = F.conv1d(x, *w.pointwise)
    if kernel > 1:
        x = x[:, :, : -(kernel - 1)]
    hidden = hidden + F.conv1d(conv_act(x), *w.ext).permute(0, 2, 1)
    hidden = hidden + 0.5 * _feed_forward(hidden, w.ff_out, act)
    return layer_norm(hidden, w.norm)


BLOCK = Piece(conformer_block, "conformer block")


def takes_fast_path(encoder: nn.Module, kwargs: dict) -> bool:
    """Whether a call computes what the fast forward computes: inference, sdpa, activations it knows."""
    config = encoder.config
    return (
        not encoder.training
        and not any(kwargs.values())
        and config._attn_implementation == "sdpa"
        and all(name in ACTIVATIONS for name in (config.activation, config.conv_glu_type, config.conv_activation))
    )


def fast_forward(encoder: nn.Module, compile: bool | None):
    """The forward of one ``Phi4MultimodalAudioModel``: the stock one's steps, with the bias built once
    and each block a ``BLOCK`` call (compiled if ``compile``; None: on CUDA); on CUDA, unless ``compile`` is
    False, replayed from a CUDA graph per input shape (``graphs``: the conformer's small kernels leave the
    GPU waiting for the host's launches)."""
    stock = encoder.forward

    def forward(hidden_states: torch.Tensor, mask: torch.Tensor | None):
        config = encoder.config
        hidden_states, hs_mask, mask = encoder.forward_embeddings(encoder.encoder_embedding(hidden_states), mask)
        batch, frames, _ = hidden_states.shape
        if frames > CHUNK:  # cut into chunks of CHUNK frames, the last one padded, as stock does
            pad = -frames % CHUNK
            hidden_states = F.pad(hidden_states, (0, 0, 0, pad))
            hidden_states = hidden_states.reshape(batch, -1, CHUNK, hidden_states.shape[-1]).flatten(0, 1)
            chunk_masks = None
            if mask is not None:
                chunk_masks = F.pad(mask.squeeze(1), (0, pad), value=False).reshape(-1, CHUNK)
            hs_mask = encoder.calculate_hs_mask(hidden_states, hidden_states.device, chunk_masks)
        relative = encoder.relative_attention_bias_layer(hidden_states)
        bias = attention_bias(hs_mask, relative, same_rows=mask is None)
        compiled = hidden_states.is_cuda if compile is None else compile
        activations = (config.activation, config.conv_glu_type, config.conv_activation)
        for layer in encoder.encoders:
            attention = layer.self_attn
            heads = attention.q_proj.out_features // attention.head_dim
            hidden_states = BLOCK(compiled, (hidden_states, bias), BlockWeights.of(layer), heads=heads,
                                  scaling=attention.scaling, kernel=layer.conv.kernel_size, activations=activations)
        if frames > CHUNK:
            hidden_states = hidden_states.reshape(batch, -1, hidden_states.shape[-1])[:, :frames]
        return hidden_states

    graphed = GraphedForward(forward, encoder, "conformer") if compile is not False else None

    def entry(hidden_states: torch.Tensor, mask: torch.Tensor | None, **kwargs):
        if not takes_fast_path(encoder, kwargs):
            return stock(hidden_states, mask, **kwargs)
        return (graphed or forward)(hidden_states, mask)

    return entry


SIZES_CHANGE = "each clip's token count read to the host before the encoder (stock: after it, one read per clip)"


def host_embed_sizes(embedding: nn.Module):
    """The forward of one ``Phi4MultimodalAudioEmbedding`` with ``audio_embed_sizes`` on the host. The stock
    forward cuts each clip's embeddings to its size after the encoder, reading the size on the host: on a
    GPU each read waits for the whole encoder, so the host reaches the decoder layers with nothing queued
    ahead (as the Whisper-style and Omni output lengths did, ``lengths.py``). The same sizes, read first."""
    stock = embedding.forward

    def forward(*args, audio_embed_sizes=None, **kwargs):
        if isinstance(audio_embed_sizes, torch.Tensor):
            audio_embed_sizes = audio_embed_sizes.cpu()
        return stock(*args, audio_embed_sizes=audio_embed_sizes, **kwargs)

    return forward


def install_sizes(embedding: nn.Module, compile: bool | None = None) -> list:
    """Read the clip sizes of one ``Phi4MultimodalAudioEmbedding`` to the host first; returns the release
    (nothing of it is compiled)."""
    return [acquire(embedding, "forward", host_embed_sizes)]


def install(encoder: nn.Module, compile: bool | None = None) -> list:
    """Build the streaming masks of one ``Phi4MultimodalAudioModel`` on its device and run its blocks
    fast; returns the releases."""
    return [acquire(encoder, "_streaming_mask", device_streaming_mask),
            acquire(encoder, "forward", lambda module: fast_forward(module, compile))]
