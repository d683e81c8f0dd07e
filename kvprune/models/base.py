"""What kvprune needs to know about a model family, and how a loaded model is matched to one.

A family is declarative: where the decoder sits, which config attribute names the audio placeholder
token. The pruning engine never looks at model classes; it asks the family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch.nn as nn

from ..registry import Registry


class UnsupportedModelError(ValueError):
    """The model is not one of the families kvprune knows how to prune."""


@dataclass(frozen=True)
class ModelFamily:
    """How to find the parts of one family of audio LLMs.

    Attribute paths are dotted names. ``entry_paths`` maps a class name to the submodule whose
    ``forward`` receives ``input_ids`` (``""`` = the model itself; the full Qwen2.5-Omni model
    delegates text generation to its ``thinker``). ``decoder_paths`` lead from that entry module to
    the module that holds ``layers`` and the final ``norm``; the first that exists wins, because
    transformers versions nest some decoders differently.
    """

    name: str
    display_name: str
    entry_paths: dict[str, str]
    decoder_paths: tuple[str, ...]
    audio_token_attrs: tuple[str, ...]
    llm_tokens_per_second: float
    #: ``config.model_type`` -> the class ``from_pretrained`` loads (``""``: AutoModelForCausalLM, remote code)
    model_types: dict[str, str] = field(default_factory=dict)
    #: ``build_inputs(processor, waves, prompt)``: one prompt's model inputs, as the family's processor makes them
    build_inputs: Callable[..., Any] | None = None
    #: ``load_processor(name_or_path, trust_remote_code)``; None: ``AutoProcessor.from_pretrained``
    load_processor: Callable[..., Any] | None = None
    #: class name -> extra ``from_pretrained`` keyword arguments (e.g. skip Qwen2.5-Omni's talker)
    load_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: str = ""

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(self.entry_paths)

    def matches(self, model: nn.Module) -> bool:
        if type(model).__name__ in self.entry_paths:
            return True
        return getattr(getattr(model, "config", None), "model_type", None) in self.model_types

    def entry(self, model: nn.Module) -> nn.Module:
        return _follow(model, self.entry_paths.get(type(model).__name__, ""))

    def decoder(self, model: nn.Module) -> nn.Module:
        entry = self.entry(model)
        for path in self.decoder_paths:
            decoder = _follow(entry, path, missing=None)
            if decoder is not None and hasattr(decoder, "layers"):
                return decoder
        raise UnsupportedModelError(
            f"{type(model).__name__}: no decoder with layers at {' or '.join(self.decoder_paths)}; "
            "this transformers version lays the model out differently from what kvprune knows."
        )

    def layers(self, model: nn.Module) -> nn.ModuleList:
        return self.decoder(model).layers

    def final_norm(self, model: nn.Module) -> nn.Module:
        return self.decoder(model).norm

    def audio_token_id(self, model: nn.Module) -> int:
        config = self.entry(model).config
        for attr in self.audio_token_attrs:
            value = _follow(config, attr, missing=None)
            if value is not None:
                return int(value)
        names = " or ".join(f"config.{a}" for a in self.audio_token_attrs)
        raise ValueError(
            f"{self.display_name}: {names} is not set, so the audio placeholder token is unknown. "
            f"Set it from the processor, e.g. `model.config.{self.audio_token_attrs[0]} = processor.audio_token_id`."
        )


def _follow(obj, path: str, missing=...):
    for part in filter(None, path.split(".")):
        if not hasattr(obj, part):
            if missing is not ...:
                return missing
            raise AttributeError(f"{type(obj).__name__} has no attribute {part!r} (path {path!r})")
        obj = getattr(obj, part)
    return obj


FAMILIES: Registry[ModelFamily] = Registry("model family")


def register_family(family: ModelFamily) -> ModelFamily:
    return FAMILIES.register(family.name, family)


def list_families() -> list[ModelFamily]:
    return FAMILIES.values()


def resolve_family(model: nn.Module) -> ModelFamily:
    """Return the family of a loaded model, or raise an error that lists the supported ones."""
    for family in FAMILIES.values():
        if family.matches(model):
            return family
    supported = "; ".join(f"{f.display_name} ({', '.join(f.architectures)})" for f in FAMILIES.values())
    raise UnsupportedModelError(
        f"kvprune does not support {type(model).__name__}. Supported model families: {supported}."
    )
