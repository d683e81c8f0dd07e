"""The prefill of kvprune's generation engine: one forward call over the prompt, made as ``generate``
makes it (its position ids, its prepared inputs), under a press, on a dynamic cache. ``prefill_call`` and
``forward_prefill`` are that call alone (the bench's ideal runs them too).

What it leaves for decoding is plain data: per decoder layer the keys and values its cache holds and
which of those slots are real prompt entries (not filler of a row that kept fewer tokens, not left
padding), plus the position ids the first decoded token takes and the next-token logits. Decoding
never needs the press again: everything pruning decided is in which entries each layer holds.

The language-model head runs on the last prompt position only (a forward pre-hook slices its input):
an unpruned 5-minute prompt would otherwise compute 7,500 rows of logits to keep one.
"""

from __future__ import annotations

import inspect
import weakref
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn as nn

from ..compat import output_cache
from ..engine import PressSession
from ..models import resolve_family
from ..engine.slots import SlotMap


@dataclass
class LayerEntries:
    """What one decoder layer's cache holds after the prefill."""

    keys: torch.Tensor  # (B, kv_heads, W, head_dim)
    values: torch.Tensor
    valid: torch.Tensor  # (B, 1 | heads, W) bool: the slot holds a prompt entry (not filler, not padding)
    slots: object  # what the layer's slots were laid out by (None: the whole prompt); equal objects share a mask


@dataclass
class Prefill:
    """What a prefill hands to decoding (batch rows in the order of the inputs)."""

    layers: list[LayerEntries]
    next_positions: torch.Tensor  # position ids of the first decoded token: (B, 1), or (k, B, 1) for multi-axis RoPE
    logits: torch.Tensor  # (B, vocab) float32: the next-token logits after each row's prompt
    outcome: object | None  # the press's PressOutcome, if a press ran

    @property
    def batch(self) -> int:
        return self.logits.shape[0]


@dataclass
class PrefillCall:
    """A prefill's forward arguments, made as ``generate`` makes them, and the inputs they came from."""

    arguments: dict  # the forward's keyword arguments
    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None  # as given (the forward may be called without it: ``prefill_call``)
    position_ids: torch.Tensor | None


def prefill_call(module: nn.Module, inputs: dict) -> PrefillCall:
    """The forward arguments of a prefill of ``inputs`` (a batch, left-padded as processors pad): the model's
    position ids and ``prepare_inputs_for_generation``'s inputs, as ``generate`` makes them.

    A batch without padding is called without its attention mask, which is HF's default and the same
    causal attention: given one, the model reads it back on the host after the audio encoder (its mask
    builder's ``padding_mask.all()``), a read that waits for the whole encoder and leaves the GPU waiting
    for the host's launch of every decoder layer."""
    inputs = dict(inputs)
    input_ids = inputs.pop("input_ids")
    attention_mask = inputs.pop("attention_mask", None)
    position_ids = _position_ids(module, input_ids, attention_mask, inputs)
    arguments = module.prepare_inputs_for_generation(
        input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, is_first_iteration=True,
        **inputs,
    )
    if attention_mask is not None and bool(attention_mask.all()):  # read before anything is queued
        arguments["attention_mask"] = None
    return PrefillCall(arguments, input_ids, attention_mask, position_ids)


#: per entry module, a context each of its prefills runs in (``layer_reuse.share_layers_below``: layers
#: < K replayed), set only while a sharing block is open
AROUND_PREFILL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: per entry module, its decoder layers >= K compiled (``prefill_layers.CompiledLayers``), as the module's latest
#: ``Generator`` set it (``compile_prefill``): every prefill of the module runs them (the bench's ideal too)
COMPILED_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def prefill_layers_way(module: nn.Module) -> str:
    """How ``module``'s prefills run their decoder layers >= K: "compiled", "as written", or "as written: " and the
    compiler's reason once they failed to compile (what a sweep records and reports)."""
    layers = COMPILED_LAYERS.get(module)
    if layers is None:
        return "as written"
    return "compiled" if layers.failed is None else f"as written: {layers.failed}"


def prefill_layers_failed(module: nn.Module) -> bool:
    """Whether ``module``'s prefills were to run their layers >= K compiled, and those failed to compile (they run as
    written from then on)."""
    layers = COMPILED_LAYERS.get(module)
    return layers is not None and layers.failed is not None


def forward_prefill(module: nn.Module, call: PrefillCall):
    """The prefill's forward (the language-model head on the last position only); returns the model's output."""
    around, compiled = AROUND_PREFILL.get(module), COMPILED_LAYERS.get(module)
    with torch.no_grad(), _last_position_logits(module), around(call) if around is not None else nullcontext(), \
            compiled.around() if compiled is not None else nullcontext():
        return module(**call.arguments)


def run_prefill(module: nn.Module, inputs: dict, press=None, observer=None) -> Prefill:
    """Prefill ``inputs`` (a batch, left-padded as processors pad) on ``module`` (the module whose
    ``generate`` writes text) under ``press`` (at its ratio; no press: unpruned). ``observer`` (a
    ``GenerationObserver``), if given, is told once the press's hooks are installed, before the forward
    (for instruments that time the press's own work around them)."""
    call = prefill_call(module, inputs)
    with under_press(module, press, observer) as session:
        output = forward_prefill(module, call)
        cache = output_cache(output)
        cache_slots = session.slots_of(cache) if session is not None else None
        outcome = session.outcome if session is not None else None
    logits = output.logits[:, -1, :].float()
    input_ids = call.input_ids
    padding = call.attention_mask.bool() if call.attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    return Prefill(
        layers=layer_entries(cache, cache_slots, padding.to(logits.device)),
        next_positions=_next_positions(call.position_ids, input_ids),
        logits=logits,
        outcome=outcome,
    )


@contextmanager
def under_press(module: nn.Module, press, observer=None):
    """The block under ``press``'s session on ``module`` (yields the ``PressSession``; None without a press),
    ``observer`` (a ``GenerationObserver``) told once the press's hooks are installed."""
    if press is None:
        yield None
        return
    session = PressSession(module, press)
    with session:
        if observer is not None:
            observer.press_installed(press)
        yield session


def layer_entries(cache, cache_slots, padding: torch.Tensor) -> list[LayerEntries]:
    """Per layer, its cached keys and values with the validity of each slot: a pruned layer's slots
    (its ``SlotMap``: filler invalid, padding positions invalid) or the whole padded prompt."""
    entries, validity = [], {}  # layers laid out by the same slots share one validity (computed once, not per layer)
    for j, layer in enumerate(cache.layers):
        slots = cache_slots[j] if cache_slots is not None else None
        key = (id(slots), layer.keys.device)
        if key not in validity:
            full = padding.to(layer.keys.device)
            validity[key] = full[:, None, :] if slots is None else _slot_validity(slots.to(layer.keys.device), full)
        valid = validity[key]
        if valid.shape[-1] != layer.keys.shape[-2]:
            raise RuntimeError(
                f"kvprune: decoder layer {j}'s cache holds {layer.keys.shape[-2]} entries where its slot map has "
                f"{valid.shape[-1]} slots; this model's cache is not laid out as kvprune expects."
            )
        entries.append(LayerEntries(layer.keys, layer.values, valid, slots))
    return entries


def _slot_validity(slots: SlotMap, padding: torch.Tensor) -> torch.Tensor:
    """(B, 1 | heads, W): a slot is valid if it is not filler and the prompt position it holds is not padding."""
    index, valid = (slots.index, slots.valid) if slots.per_head else (slots.index[:, None], slots.valid[:, None])
    rows = padding[:, None, :].expand(-1, index.shape[1], -1)
    return valid & rows.gather(-1, index)


def _position_ids(module: nn.Module, input_ids: torch.Tensor, attention_mask, inputs: dict):
    """The prompt's position ids as ``generate`` computes them (the model's own rule where it has one,
    e.g. multi-axis RoPE), or None for a model whose forward takes none."""
    if "position_ids" in inputs:
        return inputs.pop("position_ids")
    if "position_ids" not in inspect.signature(module.forward).parameters:
        return None
    model_kwargs = dict(inputs, attention_mask=attention_mask)
    return module._prepare_position_ids_for_generation(input_ids, model_kwargs)


def _next_positions(position_ids, input_ids: torch.Tensor) -> torch.Tensor:
    """Position ids of the first new token: one past each row's last prompt position, as ``generate``
    continues them (``position_ids[..., -1:] + 1``); without position ids, the padded length."""
    if position_ids is None:
        batch, length = input_ids.shape
        return torch.full((batch, 1), length, dtype=torch.long, device=input_ids.device)
    return position_ids[..., -1:].to(torch.long) + 1


@contextmanager
def _last_position_logits(module: nn.Module):
    """Run the language-model head on the last position only, for the duration of the block."""
    head = module.get_output_embeddings()
    with ExitStack() as stack:
        if head is not None:
            handle = head.register_forward_pre_hook(lambda _, args: (args[0][:, -1:], *args[1:]))
            stack.callback(handle.remove)
        yield


def family_supports_static_decoding(module: nn.Module) -> str | None:
    """Why the engine's static decoding cannot run this model (None: it can): sliding-window layers
    and layers that read another layer's cache keep entries by rules a fixed buffer does not follow."""
    family = resolve_family(module)
    config = family.decoder(module).config
    if family.structure.layer_io.kv_sources(config):
        return f"{family.display_name}'s last layers reuse earlier layers' caches"
    if getattr(config, "sliding_window", None) and "sliding_attention" in (getattr(config, "layer_types", None) or []):
        return f"{family.display_name} has sliding-window layers"
    return None
