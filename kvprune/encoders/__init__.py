"""Fast paths for the audio encoders of the supported families.

Each removes waste from a stock encoder (a Python loop of small kernels, host round trips, copies
and unfused elementwise passes) by replacing methods of module instances it finds in the model, never
a modeling file. Qwen2.5-Omni's stays bit-identical everywhere; the encoders whose layers run as
compiled functions (Whisper-style, Phi-4's and Granite's conformers) are bit-identical uncompiled (on
a CPU by default) and within the dtype's rounding compiled (on CUDA by default).
``fast_audio_encoder(model)`` installs them and returns a removable handle.
"""

from .handle import ENCODER_KINDS, EncoderKind, FastAudioEncoder, fast_audio_encoder

__all__ = ["ENCODER_KINDS", "EncoderKind", "FastAudioEncoder", "fast_audio_encoder"]
