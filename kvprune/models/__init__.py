"""Model families kvprune can prune, one module per family."""

from .base import (
    FAMILIES,
    ModelFamily,
    UnsupportedModelError,
    list_families,
    register_family,
    resolve_family,
)
from .qwen2_5_omni import QWEN2_5_OMNI
from .phi4_multimodal import PHI4_MULTIMODAL
from .voxtral import VOXTRAL
from .aero import AERO
from .qwen2_audio import QWEN2_AUDIO

__all__ = [
    "AERO",
    "FAMILIES",
    "PHI4_MULTIMODAL",
    "QWEN2_5_OMNI",
    "QWEN2_AUDIO",
    "VOXTRAL",
    "ModelFamily",
    "UnsupportedModelError",
    "list_families",
    "register_family",
    "resolve_family",
]
