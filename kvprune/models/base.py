"""What kvprune needs to know about a model family, and how a loaded model is matched to one.

A family is declarative: its names, the class it builds, and four small parts, each read by one
side of kvprune (``parts.py``): its ``structure`` by the pruning engine, its ``prompting`` by the
prompt builder, its ``loading`` by ``load_model``, its ``tiny`` model by the tests, the harness's tiny
speed presets and the demo. Each part's defaults are the layout of a transformers audio LLM
(``model.language_model``, ``model.audio_tower``, ``model.multi_modal_projector``), so a family
module writes only what differs. The pruning engine never looks at model classes; it asks the
family. The harness keeps the real shapes it measures each family's speed at, and its presets, on
its own side.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace

import torch.nn as nn
import transformers

from .parts import Loading, Prompting, Structure, Tiny

from ..registry import Registry


class UnsupportedModelError(ValueError):
    """The model is not one of the families kvprune knows how to prune."""


@dataclass(frozen=True)
class ModelFamily:
    """One family of audio LLMs: how it is named, the class it builds, and its parts by reader.

    The engine asks the family about a loaded model (``entry``, ``decoder``, ``layers``,
    ``final_norm``, ``audio_encoder``, ``audio_token_id``, ``placeholder_ids``), which it answers
    from its ``structure``; ``load_model`` reads its ``loading``, the prompt builder its
    ``prompting``, the tests and presets its ``tiny`` model (``tiny_config``, ``build``);
    ``kvprune families`` and the README's table show its ``listing``.
    """

    name: str
    display_name: str
    #: the class ``build`` makes and the family's own entry: a transformers class name (imported only
    #: when used), or the class itself (Aero-1's stand-in)
    model_class: str | type
    prompting: Prompting
    tiny: Tiny
    structure: Structure = field(default_factory=Structure)
    loading: Loading = field(default_factory=Loading)
    notes: str = ""

    def __post_init__(self) -> None:
        """``model_class`` is an entry of its own (the model itself, path ``""``), and unless declared,
        the model types ``load_model`` takes follow from the entry classes."""
        model_class = self.model_class if isinstance(self.model_class, str) else self.model_class.__name__
        structure = replace(self.structure, entry_paths={model_class: "", **self.structure.entry_paths})
        object.__setattr__(self, "structure", structure)
        if not self.loading.model_types:
            object.__setattr__(self, "loading", replace(self.loading, model_types=_model_types(structure.entry_paths)))

    @property
    def available(self) -> bool:
        """Whether the installed transformers has this family's classes (older ones lack some)."""
        if _version(transformers.__version__) < _version(self.loading.min_transformers):
            return False
        return not isinstance(self.model_class, str) or hasattr(transformers, self.model_class)

    def listing(self) -> dict[str, str]:
        """What ``kvprune families`` and the README table show of this family, as labelled text."""
        prompting = self.prompting
        return {
            "family": self.display_name,
            "classes": ", ".join(self.architectures),
            "decoder layers": f"{self.structure.decoder_paths[0]}.layers",
            "audio tokens": prompting.token_rate,
            "long audio": prompting.long_audio,
            "longest clip": "any" if prompting.max_clip_seconds is None else f"{prompting.max_clip_seconds:g} s",
            "transformers": f">= {self.loading.min_transformers}",
        }

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(self.structure.entry_paths)

    def matches(self, model: nn.Module) -> bool:
        if type(model).__name__ in self.structure.entry_paths:
            return True
        return getattr(getattr(model, "config", None), "model_type", None) in self.loading.model_types

    # what the engine asks about a loaded model, answered from the structure

    def entry(self, model: nn.Module) -> nn.Module:
        return _follow(model, self.structure.entry_paths.get(type(model).__name__, ""))

    def decoder(self, model: nn.Module) -> nn.Module:
        return _first(model, self.entry(model), self.structure.decoder_paths, "decoder with layers", having="layers")

    def layers(self, model: nn.Module) -> nn.ModuleList:
        return self.decoder(model).layers

    def final_norm(self, model: nn.Module) -> nn.Module:
        return self.decoder(model).norm

    def audio_encoder(self, model: nn.Module) -> tuple[nn.Module, nn.Module]:
        """The modules that start and end the audio encoder (with its projection into the LLM)."""
        entry = self.entry(model)
        return (
            _first(model, entry, self.structure.encoder_start_paths, "audio encoder"),
            _first(model, entry, self.structure.encoder_end_paths, "audio projection"),
        )

    def placeholder_ids(self, model: nn.Module) -> dict[str, int]:
        """Modality -> placeholder token id: audio always, the visual ones the config sets."""
        config = self.entry(model).config
        ids = {"audio": self.audio_token_id(model)}
        for modality, attrs in self.structure.visual_token_attrs.items():
            value = next((v for v in (_follow(config, a, missing=None) for a in attrs) if v is not None), None)
            if value is not None:
                ids[modality] = int(value)
        return ids

    def audio_token_id(self, model: nn.Module) -> int:
        config = self.entry(model).config
        attrs = self.structure.audio_token_attrs
        for attr in attrs:
            value = _follow(config, attr, missing=None)
            if value is not None:
                return int(value)
        names = " or ".join(f"config.{a}" for a in attrs)
        raise ValueError(
            f"{self.display_name}: {names} is not set, so the audio placeholder token is unknown. "
            f"Set it from the processor, e.g. `model.config.{attrs[0]} = processor.audio_token_id`."
        )

    # the tiny model of the tests, the harness's tiny speed presets and the demo

    def tiny_config(self, **overrides):
        """The family's tiny config. ``overrides`` replace its keyword arguments; a dict given for a
        sub-config updates that sub-config's (``text_config=dict(hidden_size=128)`` keeps the rest)."""
        # a copy: configs may edit the dicts they are given
        return self._model_class().config_class(**_merged(copy.deepcopy(self.tiny.kwargs), overrides))

    def build(self, config, **kwargs) -> nn.Module:
        """A model of this family with random weights from ``config``, nothing downloaded; ``kwargs``
        (``dtype``, ``attn_implementation``) go to ``_from_config``."""
        if self.tiny.builder is not None:
            return self.tiny.builder(config, **kwargs)
        return self._model_class()._from_config(config, **kwargs)

    def _model_class(self) -> type:
        return getattr(transformers, self.model_class) if isinstance(self.model_class, str) else self.model_class


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
