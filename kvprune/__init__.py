"""kvprune: prune audio tokens and their KV cache inside Hugging Face audio LLMs.

    from kvprune import FastVPress
    with FastVPress(layer=2)(model, ratio=0.5):
        model.generate(**inputs)
"""

from .press import CachePress, ComposedPress, PruneStats, TokenDropPress, get_press, list_presses, register_press
from .presses import DARTPress, FastVPress, FramePress, KNormPress, RandomPress
from .models import UnsupportedModelError, list_families, resolve_family
from .encoders import FastAudioEncoder, fast_audio_encoder

__version__ = "0.1.0"

__all__ = [
    "CachePress",
    "ComposedPress",
    "DARTPress",
    "FastAudioEncoder",
    "FastVPress",
    "FramePress",
    "KNormPress",
    "PruneStats",
    "RandomPress",
    "TokenDropPress",
    "UnsupportedModelError",
    "fast_audio_encoder",
    "get_press",
    "list_families",
    "list_presses",
    "register_press",
    "resolve_family",
]
