"""The parts of a family's declaration, one per reader.

A ``ModelFamily`` (``base.py``) is a name, the class it builds, notes, and four small parts that say
who reads what:

- ``Structure``, read by the pruning engine (and the harness's timers): where the decoder, its
  layers and norm, the audio encoder and the placeholder ids are, and how the decoder layers pass
  tokens on.
- ``Prompting``, read by the prompt builder (``LoadedModel.build_inputs``, the harness's long-audio
  policy, the random inputs of its speed measurements): how the processor turns audio and a prompt
  into inputs, the audio features and token counts, the token rate, and what happens to long audio.
- ``Loading``, read by ``load_model`` and ``load_processor``: which class a checkpoint loads as, its
  extra ``from_pretrained`` arguments, LoRA adapters, the processor's loader, the oldest transformers.
- ``Tiny``, read by the tests, the harness's tiny speed presets and the demo: the tiny config and,
  where ``_from_config`` does not fit, how a model with random weights is built.

Each part's defaults are the usual transformers audio LLM, so a family module writes only what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch.nn as nn

from .audio_format import AudioFormat
from .layer_io import LayerIO
from .prompting import ChatFormat


@dataclass(frozen=True)
class Structure:
    """Where the engine finds a family's parts. Attribute paths are dotted names. ``entry_paths`` maps
    a class name to the submodule whose ``forward`` receives ``input_ids``: the family's
    ``model_class`` itself (path ``""``, added by ``ModelFamily``) and any class that wraps it (the
    full Qwen2.5-Omni model delegates text generation to its ``thinker``). ``decoder_paths`` lead
    from that entry module to the module that holds ``layers`` and the final ``norm``; the first
    that exists wins, because transformers versions nest some modules differently. The encoder
    paths work the same way."""

    #: class name -> path of the entry module within it, for the classes that wrap ``model_class``
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
    #: how its decoder layers take and pass on the token sequence, where that is unusual
    layer_io: LayerIO = field(default_factory=LayerIO)
    #: modality ("video", "image") -> config attribute(s) of its placeholder id, the first set wins: the
    #: visual placeholders that presses with scope "video" or "audio+video" prune (the Omni families')
    visual_token_attrs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: ``config -> n``: the first n decoder layers add visual features to the visual tokens' hidden
    #: states (Qwen3-Omni's deepstack), so tokens of a prompt with images or video drop after them
    visual_feature_layers: Callable[[Any], int] | None = None


@dataclass(frozen=True)
class Prompting:
    """What the family's processor makes of audio and a prompt, and what its encoder makes of audio."""

    #: the audio inputs the processor makes: features and token counts for seconds of audio or for clips
    audio_format: AudioFormat
    #: audio tokens the LLM sees per second of audio (the one place this number lives)
    llm_tokens_per_second: float
    #: ``build_inputs(processor, waves, prompt)``: one prompt's model inputs, as the family's processor makes
    #: them; ``prompt`` is text (every clip first) or a ``prompting.Prompt`` (ordered segments, system
    #: turn). A ``prompting.ChatFormat``, which says how one audio and one text item are written (by
    #: default one ``{"type": "audio"}`` item per clip, in prompt order), or a function
    build_inputs: Callable[..., Any] = field(default_factory=ChatFormat)
    #: fixed audio tokens per clip, whatever its length (None: ``llm_tokens_per_second`` applies)
    tokens_per_clip: int | None = None
    #: what the family's processor and encoder do with audio longer than one chunk, in words
    long_audio: str = "whole"
    #: the longest clip in seconds the family takes as one audio item (None: no limit), so that callers
    #: can split or refuse longer audio instead of having it truncated silently
    max_clip_seconds: float | None = None

    @property
    def token_rate(self) -> str:
        """The audio token rate as people read it: per second, or per clip for fixed-size families."""
        if self.tokens_per_clip is not None:
            return f"{self.tokens_per_clip} per clip"
        return f"{self.llm_tokens_per_second:g}/s"


@dataclass(frozen=True)
class Loading:
    """How ``load_model`` and ``load_processor`` load a checkpoint of the family."""

    #: ``config.model_type`` -> the class ``from_pretrained`` loads (``""``: AutoModelForCausalLM, remote
    #: code); left empty, every class of the structure's ``entry_paths`` that transformers has, under its
    #: config's model_type (``ModelFamily`` fills it in)
    model_types: dict[str, str] = field(default_factory=dict)
    #: class name -> extra ``from_pretrained`` keyword arguments (e.g. skip Qwen2.5-Omni's talker)
    load_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: adapter name -> the checkpoint subfolder of a LoRA adapter that ``load_model`` loads (peft) and
    #: activates when the checkpoint carries it (Phi-4-multimodal's ``speech-lora``)
    adapters: dict[str, str] = field(default_factory=dict)
    #: ``load_processor(name_or_path, trust_remote_code)``; None: ``AutoProcessor.from_pretrained``
    load_processor: Callable[..., Any] | None = None
    #: the oldest transformers release whose classes and module layout this declaration matches
    min_transformers: str = "5.17"


@dataclass(frozen=True)
class Tiny:
    """The family's tiny random model: what the tests, the harness's tiny speed presets and the demo build."""

    #: keyword arguments of the tiny config, sub-configs as dicts (``ModelFamily.tiny_config`` makes it)
    kwargs: dict[str, Any]
    #: ``builder(config, **kwargs)`` where ``model_class._from_config`` does not fit, for any config, tiny
    #: or real shapes (Gemma-3n: no timm vision tower)
    builder: Callable[..., nn.Module] | None = None
