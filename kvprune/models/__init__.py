"""Model families kvprune can prune, one module per family."""

from .base import (
    FAMILIES,
    ModelFamily,
    UnsupportedModelError,
    list_families,
    register_family,
    resolve_family,
)
from .parts import Loading, Prompting, Structure, Tiny
from .qwen2_5_omni import QWEN2_5_OMNI
from .phi4_multimodal import PHI4_MULTIMODAL
from .voxtral import VOXTRAL
from .aero import AERO
from .qwen2_audio import QWEN2_AUDIO
from .qwen3_omni import QWEN3_OMNI
from .audioflamingo3 import AUDIO_FLAMINGO_3
from .granite_speech import GRANITE_SPEECH
from .gemma3n import GEMMA3N

__all__ = [
    "AERO",
    "AUDIO_FLAMINGO_3",
    "FAMILIES",
    "GEMMA3N",
    "GRANITE_SPEECH",
    "PHI4_MULTIMODAL",
    "QWEN2_5_OMNI",
    "QWEN2_AUDIO",
    "QWEN3_OMNI",
    "VOXTRAL",
    "Loading",
    "ModelFamily",
    "Prompting",
    "Structure",
    "Tiny",
    "UnsupportedModelError",
    "list_families",
    "register_family",
    "resolve_family",
]
