"""The output lengths a model checks after its audio encoder, handed over from the host.

Qwen2.5-Omni's thinker, Aero-1 and Qwen2-Audio compute each clip's encoder output length on the device
before the encoder (``_get_feat_extract_output_lengths``) and read it back on the host after it (a
length check, a cut per clip): that read waits for the whole encoder, so the host reaches the decoder
layers with nothing queued ahead and launches each while the GPU waits (the layers after a press at
ratio 0.9 are short enough for that to show). ``host_output_lengths`` hands the same lengths over from
the host, read before the encoder is queued, so the reads after it wait for nothing.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def host_output_lengths(encoder: nn.Module):
    """The encoder's ``_get_feat_extract_output_lengths`` with the output lengths (its second result, which
    the models only read on the host or move where they need it) on the host: the same values, read before
    the encoder runs."""
    stock = encoder._get_feat_extract_output_lengths

    def lengths(input_lengths):
        after_convolutions, output_lengths = stock(input_lengths)
        return after_convolutions, output_lengths.cpu() if isinstance(output_lengths, torch.Tensor) else output_lengths

    return lengths
