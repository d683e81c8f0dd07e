"""What kvprune needs to know about a model family, and how a loaded model is matched to one.

A family is declarative: where the decoder and the audio encoder sit, which config attribute names
the audio placeholder token, how its processor builds a prompt, what audio inputs look like and its
tiny config. The fields most families share have defaults (the layout of a transformers audio LLM:
``model.language_model``, ``model.audio_tower``, ``model.multi_modal_projector``), so a family module
writes only what differs. The pruning engine never looks at model classes; it asks the family. The
tests and the demo build their tiny models from it; the harness keeps the real shapes it measures
each family's speed at, and its presets, on its own side.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch.nn as nn
import transformers

from .audio_format import AudioFormat
from .layer_io import LayerIO
from .prompting import ChatFormat

from ..registry import Registry


class UnsupportedModelError(ValueError):
    """The model is not one of the families kvprune knows how to prune."""


@dataclass(frozen=True)
class ModelFamily:
    """How to find the parts of one family of audio LLMs.

    Attribute paths are dotted names. ``entry_paths`` maps a class name to the submodule whose
    ``forward`` receives ``input_ids``: ``model_class`` itself (path ``""``) and any class that wraps
    it (the full Qwen2.5-Omni model delegates text generation to its ``thinker``). ``decoder_paths``
    lead from that entry module to the module that holds ``layers`` and the final ``norm``; the first
    that exists wins, because transformers versions nest some modules differently. The encoder paths
    work the same way.
    """

    name: str
    display_name: str
    #: the class the tiny config builds: a transformers class name (imported only when used), or the
    #: class itself (Aero-1's stand-in)
    model_class: str | type
    #: audio tokens the LLM sees per second of audio (the one place this number lives)
    llm_tokens_per_second: float
    #: the audio inputs the processor makes: features and token counts for seconds of audio or for clips
    audio_format: AudioFormat
    #: keyword arguments of the tiny config, sub-configs as dicts (see ``tiny_config``)
    tiny_kwargs: dict[str, Any]
    #: class name -> path of the entry module within it, for the classes that wrap ``model_class``;
    #: ``model_class`` itself is added with ``""`` (the model itself)
    entry_paths: dict[str, str] = field(default_factory=dict)
    #: transformers 5.2x nests the text model at ``model.language_model``; older releases (and
    #: text-model classes) keep it at ``model``
    decoder_paths: tuple[str, ...] = ("model.language_model", "model")
    #: config attribute(s) holding the audio placeholder id, the first that is set wins
    audio_token_attrs: tuple[str, ...] = ("audio_token_id", "audio_token_index")
    #: the module whose call starts the audio encoder and the one whose output is the audio embeddings
    #: the LLM receives (the harness times the span between them and checks their random weights)
    encoder_start_paths: tuple[str, ...] = ("model.audio_tower", "audio_tower")
    encoder_end_paths: tuple[str, ...] = ("model.multi_modal_projector",)
    #: ``config.model_type`` -> the class ``from_pretrained`` loads (``""``: AutoModelForCausalLM, remote
    #: code); left empty, every class of ``entry_paths`` that transformers has, under its config's model_type
    model_types: dict[str, str] = field(default_factory=dict)
    #: ``build_inputs(processor, waves, prompt)``: one prompt's model inputs, as the family's processor makes
    #: them; ``prompt`` is text (every clip first) or a ``prompting.Prompt`` (ordered segments, system
    #: turn). A ``prompting.ChatFormat``, which says how one audio and one text item are written (by
    #: default one ``{"type": "audio"}`` item per clip, in prompt order), or a function
    build_inputs: Callable[..., Any] = field(default_factory=ChatFormat)
    #: ``load_processor(name_or_path, trust_remote_code)``; None: ``AutoProcessor.from_pretrained``
    load_processor: Callable[..., Any] | None = None
    #: class name -> extra ``from_pretrained`` keyword arguments (e.g. skip Qwen2.5-Omni's talker)
    load_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: adapter name -> the checkpoint subfolder of a LoRA adapter that ``load_model`` loads (peft) and
    #: activates when the checkpoint carries it (Phi-4-multimodal's ``speech-lora``)
    adapters: dict[str, str] = field(default_factory=dict)
    notes: str = ""
    #: ``builder(config, **kwargs)`` where ``model_class._from_config`` does not fit (Gemma-3n: no timm vision tower)
    builder: Callable[..., nn.Module] | None = None
    #: how its decoder layers take and pass on the token sequence, where that is unusual
    layer_io: LayerIO = field(default_factory=LayerIO)
    #: the oldest transformers release whose classes and module layout this declaration matches
    min_transformers: str = "5.17"
    #: what the family's processor and encoder do with audio longer than one chunk, in words
    long_audio: str = "whole"
    #: the longest clip in seconds the family takes as one audio item (None: no limit), so that callers
    #: can split or refuse longer audio instead of having it truncated silently
    max_clip_seconds: float | None = None
    #: fixed audio tokens per clip, whatever its length (None: ``llm_tokens_per_second`` applies)
    tokens_per_clip: int | None = None
    #: modality ("video", "image") -> config attribute(s) of its placeholder id, the first set wins: the
    #: visual placeholders that presses with scope "video" or "audio+video" prune (the Omni families')
    visual_token_attrs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: ``config -> n``: the first n decoder layers add visual features to the visual tokens' hidden
    #: states (Qwen3-Omni's deepstack), so tokens of a prompt with images or video drop after them
    visual_feature_layers: Callable[[Any], int] | None = None

    def __post_init__(self) -> None:
        model_class = self.model_class if isinstance(self.model_class, str) else self.model_class.__name__
        object.__setattr__(self, "entry_paths", {model_class: "", **self.entry_paths})
        if not self.model_types:
            object.__setattr__(self, "model_types", _model_types(self.entry_paths))

    @property
    def available(self) -> bool:
        """Whether the installed transformers has this family's classes (older ones lack some)."""
        if _version(transformers.__version__) < _version(self.min_transformers):
            return False
        return not isinstance(self.model_class, str) or hasattr(transformers, self.model_class)

    @property
    def token_rate(self) -> str:
        """The audio token rate as people read it: per second, or per clip for fixed-size families."""
        if self.tokens_per_clip is not None:
            return f"{self.tokens_per_clip} per clip"
        return f"{self.llm_tokens_per_second:g}/s"

    def listing(self) -> dict[str, str]:
        """What ``kvprune families`` and the README table show of this family, as labelled text."""
        return {
            "family": self.display_name,
            "classes": ", ".join(self.architectures),
            "decoder layers": f"{self.decoder_paths[0]}.layers",
            "audio tokens": self.token_rate,
            "long audio": self.long_audio,
            "longest clip": "any" if self.max_clip_seconds is None else f"{self.max_clip_seconds:g} s",
            "transformers": f">= {self.min_transformers}",
        }

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
        return _first(model, self.entry(model), self.decoder_paths, "decoder with layers", having="layers")

    def audio_encoder(self, model: nn.Module) -> tuple[nn.Module, nn.Module]:
        """The modules that start and end the audio encoder (with its projection into the LLM)."""
        entry = self.entry(model)
        return (
            _first(model, entry, self.encoder_start_paths, "audio encoder"),
            _first(model, entry, self.encoder_end_paths, "audio projection"),
        )

    def tiny_config(self, **overrides):
        """The family's tiny config. ``overrides`` replace its keyword arguments; a dict given for a
        sub-config updates that sub-config's (``text_config=dict(hidden_size=128)`` keeps the rest)."""
        # a copy: configs may edit the dicts they are given
        return self._model_class().config_class(**_merged(copy.deepcopy(self.tiny_kwargs), overrides))

    def build(self, config, **kwargs) -> nn.Module:
        """A model of this family with random weights from ``config``, nothing downloaded; ``kwargs``
        (``dtype``, ``attn_implementation``) go to ``_from_config``."""
        if self.builder is not None:
            return self.builder(config, **kwargs)
        return self._model_class()._from_config(config, **kwargs)

    def _model_class(self) -> type:
        return getattr(transformers, self.model_class) if isinstance(self.model_class, str) else self.model_class

    def layers(self, model: nn.Module) -> nn.ModuleList:
        return self.decoder(model).layers

    def final_norm(self, model: nn.Module) -> nn.Module:
        return self.decoder(model).norm

    def placeholder_ids(self, model: nn.Module) -> dict[str, int]:
        """Modality -> placeholder token id: audio always, the visual ones the config sets."""
        config = self.entry(model).config
        ids = {"audio": self.audio_token_id(model)}
        for modality, attrs in self.visual_token_attrs.items():
            value = next((v for v in (_follow(config, a, missing=None) for a in attrs) if v is not None), None)
            if value is not None:
                ids[modality] = int(value)
        return ids

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


def _model_types(class_names) -> dict[str, str]:
    """``config.model_type`` -> class name, for each of ``class_names`` that transformers has."""
    types = {}
    for name in class_names:
        try:
            model_class = getattr(transformers, name)
        except (AttributeError, ImportError, RuntimeError):  # not in this transformers, or it fails to import
            continue
        types[model_class.config_class.model_type] = name
    return types


def _version(text: str) -> tuple[int, ...]:
    """(major, minor, patch) of a version string; pre-release suffixes ('5.25.0.dev0') are ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _merged(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        nested = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], value) if nested else value
    return merged


def _first(model: nn.Module, root: nn.Module, paths: tuple[str, ...], what: str, having: str | None = None):
    """The module at the first of ``paths`` (from ``root``) that exists and has attribute ``having``."""
    for path in paths:
        module = _follow(root, path, missing=None)
        if module is not None and (having is None or hasattr(module, having)):
            return module
    raise UnsupportedModelError(
        f"{type(model).__name__}: no {what} at {' or '.join(paths)}; "
        "this transformers version lays the model out differently from what kvprune knows."
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
