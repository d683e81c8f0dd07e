"""kvprune: prune audio tokens and their KV cache inside Hugging Face audio LLMs.

    from kvprune import FastVPress
    with FastVPress(layer=2)(model, ratio=0.5) as outcome:
        model.generate(**inputs)
    outcome.stats, outcome.kept_positions
"""

from .press import (
    CachePress, ComposedPress, DelegatingCachePress, Press, TokenDropPress, get_press, list_presses, register_press,
)
from .presses import (
    AdaKVPress, DARTPress, ExpectedAttentionPress, FastVPress, FramePress, KNormPress, PyramidKVPress, RandomKVPress,
    RandomPress, SnapKVPress, StreamingLLMPress, TOVAPress,
)
from .cache_scoring import CacheEvidence
from .outcome import PressOutcome, PruneStats
from .specs import MethodSpec, MethodSpecError, parse_method, parse_methods
from .models import UnsupportedModelError, list_families, resolve_family
from .models.loading import LoadedModel, load_model
from .encoders import FastAudioEncoder, fast_audio_encoder
from .generation import GenerationOutput, Generator, generate

__version__ = "0.1.0"

__all__ = [
    "AdaKVPress",
    "CacheEvidence",
    "CachePress",
    "ComposedPress",
    "DARTPress",
    "DelegatingCachePress",
    "ExpectedAttentionPress",
    "FastAudioEncoder",
    "FastVPress",
    "FramePress",
    "GenerationOutput",
    "Generator",
    "KNormPress",
    "LoadedModel",
    "MethodSpec",
    "MethodSpecError",
    "Press",
    "PressOutcome",
    "PruneStats",
    "PyramidKVPress",
    "RandomKVPress",
    "RandomPress",
    "SnapKVPress",
    "StreamingLLMPress",
    "TOVAPress",
    "TokenDropPress",
    "UnsupportedModelError",
    "fast_audio_encoder",
    "generate",
    "get_press",
    "list_families",
    "list_presses",
    "load_model",
    "parse_method",
    "parse_methods",
    "register_press",
    "resolve_family",
]
