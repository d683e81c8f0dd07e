"""A press checked against a model before anything is hooked: the session's model checks.

A ``PressPlan`` finds, through the model's family, the parts of the model the engine hooks (the
entry module, the decoder layers, the final norm, the audio placeholder id) and checks what can be
checked before the model runs: the press kinds, each part's layer, layers that share another
layer's cache, sliding-window layers, and cache presses composed together. ``PressSession``
(``kvprune.engine``) is a plan with its hooks installed; ``validate_press`` makes the plan alone, so
that the harness can refuse a method before its first sample.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from . import static_cache
from .masks import is_flash
from ..models import resolve_family


class PressPlan:
    """A press's parts on one model: which part drops tokens (at most one, at layer ``k``) and which
    compress the cache, the model's parts they act on, all checked; nothing is installed."""

    def __init__(self, model: nn.Module, press):
        parts = press.parts()
        unknown = sorted({p.kind for p in parts} - {"token", "cache"})
        if unknown:
            raise ValueError(f"press kind {unknown[0]!r} is unknown to the engine: a press is a TokenDropPress or a CachePress.")
        droppers = [p for p in parts if p.kind == "token"]  # at most one: ComposedPress sees to it
        self.press = press
        self.compressors = [p for p in parts if p.kind == "cache"]
        self.dropper = droppers[0] if droppers else None
        self.prunes = press.prunes  # else the model runs as without the press
        self.family = resolve_family(model)
        self.entry = self.family.entry(model)
        self.layers = self.family.layers(model)
        self.norm = self.family.final_norm(model)
        self.placeholder_ids = self.family.placeholder_ids(model)  # modality -> placeholder token id
        visual_layers = self.family.structure.visual_feature_layers
        self.visual_layers = visual_layers(self.entry.config) if visual_layers else 0
        self.decoder_config = self.family.decoder(model).config
        self.attn_implementation = self.decoder_config._attn_implementation
        self.io = self.family.structure.layer_io
        self.kv_sources = self.io.kv_sources(self.decoder_config)  # layers attending to another layer's cache
        n_layers = len(self.layers)
        # the layers a cache press can compress: up to the last that holds a cache of its own (the sharing
        # layers come last), so that depth-dependent budgets (PyramidKV) span the layers that use them
        self.cache_layers = 1 + max(j for j in range(n_layers) if j not in self.kv_sources)
        for part in parts:
            if not 1 <= part.layer < n_layers:
                raise ValueError(
                    f"layer={part.layer} is invalid for {self.family.display_name} with {n_layers} decoder "
                    f"layers: it must be in [1, {n_layers - 1}] (layer 0 must stay full length)."
                )
        self.k = self.dropper.layer if self.dropper else n_layers
        _check_kv_sharing(self.k, self.kv_sources, self.family.display_name)
        first_adjusted = min([self.k, *(p.layer for p in self.compressors)])
        self.window = _smallest_window(self.decoder_config, first_adjusted)
        _check_cache_presses(self.compressors, self.attn_implementation)
        self.kv_groups = self.decoder_config.num_attention_heads // self.decoder_config.num_key_value_heads
        self.rotary = getattr(self.family.decoder(model), "rotary_emb", None)
        self.layer_types = getattr(self.decoder_config, "layer_types", None) or ["full_attention"] * n_layers

    def check_window(self, length: int) -> None:
        """Sliding-window layers keep only their last window of tokens; a pruned one would evict by
        count what the mask places by position, so pruning stays exact only within one window."""
        if self.window is not None and length >= self.window:
            raise ValueError(
                f"{self.family.display_name}: prompt and generated tokens reach {length}, but its sliding-window "
                f"layers hold {self.window - 1} tokens; kvprune prunes them exactly only while everything fits one "
                "window. Use a shorter prompt or fewer new tokens."
            )

    def check_visual_layers(self, has_visual: bool) -> None:
        """Tokens of a prompt with images or video may drop only after the layers that add visual
        features to their hidden states (Qwen3-Omni's deepstack), which expect every visual token."""
        if has_visual and self.dropper is not None and self.k < self.visual_layers:
            raise ValueError(
                f"layer={self.k} is invalid for {self.family.display_name} with images or video in the prompt: its first "
                f"{self.visual_layers} decoder layers add visual features to every visual token; prune at layer "
                f"{self.visual_layers} or later."
            )

    def rope_frequencies(self, layer_idx: int) -> torch.Tensor | None:
        """The inverse frequencies of the rotary embedding layer ``layer_idx`` is given: the model's one
        set (``inv_freq``), or its attention type's (Gemma-3n's sliding layers turn at another base:
        ``sliding_attention_inv_freq``); None where the model exposes none. Read when used, as dynamic
        RoPE variants replace them."""
        shared = getattr(self.rotary, "inv_freq", None)
        return shared if shared is not None else getattr(self.rotary, f"{self.layer_types[layer_idx]}_inv_freq", None)


def validate_press(model: nn.Module, press, static: bool = False, prunes: bool | None = None) -> None:
    """Raise the error ``with press(model):`` would raise (unknown family, a layer out of range,
    presses that cannot run together), and with ``static`` the one generating on a static cache
    would raise (a model whose static cache cannot hold a pruned prompt), without installing
    anything on the model: what the sweep checks for every method before its first sample.
    ``prunes``: check it as a press that prunes (or not) whatever its ratio (None: as it does at its own)."""
    plan = PressPlan(model, press)
    if static and (plan.prunes if prunes is None else prunes):
        static_cache.check_model(plan.entry.config, plan.family.display_name, plan.kv_sources)


def _check_kv_sharing(k: int, sources: dict[int, int], name: str) -> None:
    """A layer that attends to another layer's cache must see the tokens that layer kept."""
    split = sorted(source for layer, source in sources.items() if source < k <= layer)
    if split:
        raise ValueError(
            f"layer={k} is invalid for {name}: its layers {min(sources)}.. attend to the keys and values of layers "
            f"{sorted(set(sources.values()))}, which must hold the same tokens; prune at layer {split[0]} or earlier."
        )


def _smallest_window(config, first_layer: int) -> int | None:
    """The smallest sliding window among layers ``first_layer``.. (None: no sliding-window layer there)."""
    types = getattr(config, "layer_types", None) or []
    window = getattr(config, "sliding_window", None)
    sliding = [j for j, kind in enumerate(types) if kind == "sliding_attention" and j >= first_layer]
    return window if sliding and window else None


def _check_cache_presses(presses, attn_implementation: str) -> None:
    """Cache presses composed on one model must count their candidates the same way; a head-wise
    press keeps entries per head, which nothing else can compress further, and flash attention
    cannot mask per head."""
    scopes = sorted({press.scope for press in presses})
    if len(scopes) > 1:
        raise ValueError(f"cache presses composed together must share one scope, not {' and '.join(scopes)}.")
    if any(press.headwise for press in presses):
        if len(presses) > 1:
            raise ValueError("a head-wise cache press (adakv) cannot be composed with another cache press.")
        if is_flash(attn_implementation):
            raise NotImplementedError(
                "head-wise cache compression (adakv) masks evicted entries per head, which flash attention's "
                "padding mask cannot express; load the model with attn_implementation='sdpa' or 'eager'."
            )
