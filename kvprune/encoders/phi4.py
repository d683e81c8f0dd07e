"""Phi-4-multimodal's audio encoder (a conformer): its streaming mask, built on the device.

On every call the encoder builds a (T, T) boolean "streaming" attention mask with
``adaptive_enc_mask`` on the host (numpy chunk starts, then comparisons and an index search over
T x T positions), expands it over the batch and copies it to the device. Audio longer than 500
frames after subsampling (40 s) is then cut into 500-frame chunks and a second mask is built the
same way, the first one being thrown away. The host work grows with T^2 and the device waits for
it (5 minutes of audio: a 3,750 x 3,750 mask). With the released configuration (``chunk_size=-1``)
the mask is all True.

The replacement builds the same boolean mask from the chunk index of each position with a few
tensor operations on the encoder's device. Equal booleans, so a bit-identical encoder output.
Training mode (which draws random chunk starts) and invalid chunk settings go to the stock method.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .overrides import acquire

CHANGE = "streaming mask: built on the device with a few tensor ops (stock: built on the host in O(T^2), then copied)"


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


def install(encoder: nn.Module) -> list:
    """Build the streaming masks of one ``Phi4MultimodalAudioModel`` on its device; returns the release."""
    return [acquire(encoder, "_streaming_mask", device_streaming_mask)]
