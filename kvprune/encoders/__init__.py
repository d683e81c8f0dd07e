"""Exact fast paths for the audio encoders of the supported families.

Each removes waste from a stock encoder (a Python loop of small kernels, host round trips) by
replacing one method of module instances it finds in the model, never a modeling file; the output
stays bit-identical. ``fast_audio_encoder(model)`` installs them and returns a removable handle.
"""

from .handle import ENCODER_KINDS, EncoderKind, FastAudioEncoder, fast_audio_encoder

__all__ = ["ENCODER_KINDS", "EncoderKind", "FastAudioEncoder", "fast_audio_encoder"]
