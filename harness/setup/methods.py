"""Every method checked against a model before anything runs, on the model's skeleton:
its modules built on the meta device from its config (no weights read, no memory). A bad layer or
parameter then stops a command before its first run instead of failing once per sample or request."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import transformers

from kvprune.engine.press_plan import validate_press
from kvprune.models.loading import family_of_checkpoint
from kvprune.press import Press


def check_presses(model: nn.Module, model_name: str, presses: dict[str, Press], static: bool = False,
                  prunes: bool | None = None) -> None:
    """Every press (keyed by how an error names it: its method's label, with its ratio where it has one)
    against ``model``, and with ``static`` against the static cache decoding runs on (``prunes``: as
    ``validate_press``'s): a layer out of range or presses that cannot run together stop a command
    before its first run, not once per sample or request."""
    for name, press in presses.items():
        for on_static in (False, True) if static else (False,):
            try:
                validate_press(model, press, static=on_static, prunes=prunes)
            except (ValueError, NotImplementedError) as error:
                fix = " On the command line: --decoding dynamic." if on_static else ""
                raise ValueError(f"method {name} cannot run on {model_name}: {error}{fix}") from None


def check_methods(model_name: str, build: Callable[[], nn.Module], presses: dict[str, Press],
                  static: bool = False, prunes: bool | None = None) -> None:
    """``check_presses`` on the skeleton ``build()`` makes on the meta device. A model that cannot be
    built so (e.g. remote code that computes on its weights at init) is left to the check of the
    loaded or built model."""
    try:
        with torch.device("meta"):
            skeleton = build()
    except Exception:
        return
    check_presses(skeleton, model_name, presses, static=static, prunes=prunes)


def checkpoint_skeleton(path: str, trust_remote_code: bool, attn_implementation: str) -> Callable[[], nn.Module]:
    """How to build a checkpoint's skeleton from its config, as its family builds the model. Reading the
    checkpoint's family fails here, with the error that says it is not a supported model."""
    family, model_type = family_of_checkpoint(path, trust_remote_code)

    def build() -> nn.Module:
        config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        class_name = family.loading.model_types[model_type]
        if class_name == family.model_class:  # the family's own build (Gemma-3n: without its vision tower)
            return family.build(config, attn_implementation=attn_implementation)
        if class_name:
            return getattr(transformers, class_name)._from_config(config, attn_implementation=attn_implementation)
        return transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)

    return build
