"""kvprune: prune audio tokens and their KV cache inside Hugging Face audio LLMs.

    from kvprune import FastVPress
    with FastVPress(layer=2)(model, ratio=0.5) as outcome:
        model.generate(**inputs)
    outcome.stats, outcome.kept_positions
"""

import importlib
import importlib.util

#: where each public name lives; ``import kvprune`` imports none of them (nor torch), the first use of
#: a name imports its module, so that a command line can refuse a mistake before loading torch
_EXPORTS = {
    **dict.fromkeys(["CachePress", "ComposedPress", "DelegatingCachePress", "Press", "TokenDropPress", "get_press",
                     "list_presses", "register_press"], ".press"),
    **dict.fromkeys(["AdaKVPress", "DARTPress", "ExpectedAttentionPress", "FastVPress", "FramePress", "KNormPress",
                     "PyramidKVPress", "RandomKVPress", "RandomPress", "SnapKVPress", "StreamingLLMPress", "TOVAPress"],
                    ".presses"),
    "CacheEvidence": ".engine.cache_scoring",
    **dict.fromkeys(["PressOutcome", "PruneStats"], ".engine.outcome"),
    **dict.fromkeys(["MethodSpec", "MethodSpecError", "parse_method", "parse_methods"], ".specs"),
    **dict.fromkeys(["UnsupportedModelError", "list_families", "resolve_family"], ".models"),
    **dict.fromkeys(["LoadedModel", "load_model"], ".models.loading"),
    **dict.fromkeys(["FastAudioEncoder", "fast_audio_encoder"], ".encoders"),
    **dict.fromkeys(["GenerationOutput", "Generator", "generate"], ".generation"),
}


def __getattr__(name: str):
    """A public name, imported from its module on first use (PEP 562); a submodule by its name."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
