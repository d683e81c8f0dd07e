"""Load any supported model by Hugging Face id or local directory, with its processor.

The family is read from the checkpoint's config (``model_type``), so the same call serves a hub id
and a folder written by ``save_pretrained``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import transformers

from .base import ModelFamily, UnsupportedModelError, list_families
from .prompting import Prompt

DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """A model, its processor and its family: everything the harness needs to run a prompt."""

    name: str
    family: ModelFamily
    model: nn.Module
    processor: Any
    adapters: tuple[str, ...] = ()  # the LoRA adapters loaded and active

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def build_inputs(self, waves, prompt: str | Prompt):
        """The model inputs of ``waves`` and a prompt (text after every clip, or ordered segments)."""
        inputs = self.family.prompting.build_inputs(self.processor, waves, prompt)
        dtype = next(self.model.parameters()).dtype
        return {k: _to(v, self.device, dtype) for k, v in inputs.items()}

    @property
    def generating_module(self) -> nn.Module:
        """The module whose ``generate`` produces text (the thinker of a full Qwen2.5-Omni)."""
        return self.family.entry(self.model)

    def decode(self, ids: torch.Tensor) -> str:
        return self.processor.batch_decode(ids, skip_special_tokens=True)[0].strip()

    def audio_tokens(self, input_ids: torch.Tensor) -> int:
        return int((input_ids == self.family.audio_token_id(self.model)).sum())

    def placeholder_counts(self, input_ids: torch.Tensor) -> dict[str, int]:
        """Placeholders of each modality the model has (audio; video and image for the Omni families)."""
        return {modality: int((input_ids == token).sum()) for modality, token in self.family.placeholder_ids(self.model).items()}


def _to(value, device, dtype):
    if not isinstance(value, torch.Tensor):
        return value
    return value.to(device=device, dtype=dtype if value.is_floating_point() else None)


class ModelLoadError(ValueError):
    """A checkpoint could not be found or read; the message says where kvprune looked."""


def family_of_checkpoint(name_or_path: str, trust_remote_code: bool = False) -> tuple[ModelFamily, str]:
    """The family of a checkpoint and the model_type its config declares."""
    if _looks_local(name_or_path) and not Path(name_or_path).expanduser().is_dir():
        raise ModelLoadError(f"model directory {name_or_path} not found (give a local checkpoint folder or a Hugging Face id).")
    try:
        config = transformers.AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        if "trust_remote_code" in str(error):
            raise ModelLoadError(
                f"{name_or_path} ships its own modeling code (Aero-1 does); rerun with --trust-remote-code "
                "(trust_remote_code=True) if you trust it."
            ) from None
        raise ModelLoadError(
            f"cannot read the config of {name_or_path}: not a checkpoint folder here, and the Hugging Face Hub "
            f"could not provide it ({error.__class__.__name__}: {str(error).splitlines()[0]})."
        ) from None
    for family in list_families():
        if config.model_type in family.loading.model_types:
            return family, config.model_type
    supported = "; ".join(f"{f.display_name} ({', '.join(f.loading.model_types)})" for f in list_families())
    raise UnsupportedModelError(
        f"{name_or_path}: model_type {config.model_type!r} is not a supported audio LLM. "
        f"Supported model types: {supported}."
    )


def _looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or Path(name).exists()


def load_model(
    name_or_path: str | Path,
    *,
    dtype: str = "auto",
    device: str | None = None,
    device_map: str | None = None,
    attn_implementation: str = "sdpa",
    trust_remote_code: bool = False,
) -> LoadedModel:
    """``from_pretrained`` the model and processor of a supported family."""
    path = str(name_or_path)
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is invalid; choose one of {', '.join(DTYPES)}.")
    family, model_type = family_of_checkpoint(path, trust_remote_code)
    class_name = family.loading.model_types[model_type]
    model_class = getattr(transformers, class_name) if class_name else transformers.AutoModelForCausalLM
    model = model_class.from_pretrained(
        path,
        dtype=DTYPES[dtype],
        device_map=device_map,
        attn_implementation=attn_implementation,
        trust_remote_code=trust_remote_code,
        **family.loading.load_kwargs.get(class_name, {}),
    )
    adapters = tuple(name for name, subfolder in family.loading.adapters.items() if _carries_adapter(path, subfolder))
    for name in adapters:
        _load_adapter(model, path, name, family.loading.adapters[name])
    if device_map is None:
        model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    processor = load_processor(path, family, trust_remote_code)
    return LoadedModel(name=path, family=family, model=model.eval(), processor=processor, adapters=adapters)


def load_processor(name_or_path: str | Path, family: ModelFamily, trust_remote_code: bool = False):
    """The processor of a checkpoint of ``family``, as ``load_model`` loads it (without the weights:
    what a prompt becomes can be checked before a model loads)."""
    load = family.loading.load_processor or transformers.AutoProcessor.from_pretrained
    return load(str(name_or_path), trust_remote_code=trust_remote_code)


def _carries_adapter(path: str, subfolder: str) -> bool:
    """Whether the checkpoint (folder or Hub id) has a LoRA adapter in ``subfolder``."""
    if _looks_local(path):
        return (Path(path).expanduser() / subfolder / "adapter_config.json").is_file()
    found = transformers.utils.cached_file(
        path, "adapter_config.json", subfolder=subfolder, _raise_exceptions_for_missing_entries=False
    )
    return found is not None


def _load_adapter(model: nn.Module, path: str, name: str, subfolder: str) -> None:
    """Insert a LoRA adapter the checkpoint carries into the model's own modules (no wrapper model,
    so the family still recognises it); it is active from then on. peft is needed only here."""
    try:
        import peft
    except ImportError:
        raise ModelLoadError(
            f"{path} carries a LoRA adapter in {subfolder}/ that the model needs for audio; install peft "
            "(pip install 'kvprune[lora]') to load it."
        ) from None
    config = peft.PeftConfig.from_pretrained(path, subfolder=subfolder)
    peft.inject_adapter_in_model(config, model, adapter_name=name)
    weights = peft.utils.load_peft_weights(path, subfolder=subfolder)
    # saved from a PeftModel, whose keys start with base_model.model.
    weights = {key.removeprefix("base_model.model."): value for key, value in weights.items()}
    result = peft.set_peft_model_state_dict(model, weights, adapter_name=name)
    missing = [key for key in result.missing_keys if f".{name}." in key]
    if result.unexpected_keys or missing:
        raise ModelLoadError(
            f"the LoRA adapter in {path}/{subfolder} does not fit the model: "
            f"unexpected {result.unexpected_keys[:3]}, missing {missing[:3]}"
        )
