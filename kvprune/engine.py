"""The pruning engine: hooks on a stock Hugging Face model that drop audio tokens at decoder layer K.

One ``PressSession`` is live per ``with press(model):`` block. Per forward call of the model:

1. The entry module's pre-hook reads ``input_ids`` and the cache. A call that starts from an empty
   cache is a *prefill*: the audio clips are found and, if any token is to go, the call is marked for
   pruning. A call that continues a cache pruned earlier reuses that cache's layout.
2. Layers ``0..K-1`` run untouched on the full sequence. Layer K-1's attention is recorded (keys and
   the last query's attention row) and its output kept, if the press needs them.
3. At layer K the press picks the audio tokens to keep; the hidden states, rotary embeddings,
   position ids and attention mask are gathered to the kept slots. Every later layer gets the same
   gathered arguments, so the KV cache of layers >= K holds only the kept tokens.
4. On later calls (decoding, another turn) layers >= K get the attention mask restricted to their
   cached slots; nothing else changes, because kept tokens keep their original positions.

Cache layer 0 stays full length: HF sizes masks and positions from it, which is why pruning at
layer 0 is refused.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from .audio_spans import AudioClip, find_clips
from .layout import CacheLayout, SlotMap
from .masks import is_flash, restrict_mask
from .models import resolve_family
from .recording import AttentionRecorder

if TYPE_CHECKING:
    from .press import TokenDropPress

CACHE_KWARGS = ("cache", "past_key_values")  # transformers renamed past_key_values -> cache in 5.2x


def find_cache(kwargs: dict) -> Any:
    for name in CACHE_KWARGS:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def output_cache(output: Any) -> Any:
    for name in CACHE_KWARGS:
        value = output.get(name) if isinstance(output, dict) else getattr(output, name, None)
        if value is not None:
            return value
    return None


@dataclass
class Evidence:
    """What layer K-1 computed for the prompt, for presses to score audio tokens with (batch-first)."""

    is_audio: torch.Tensor  # (B, S) bool
    valid: torch.Tensor  # (B, S) bool, False on padding
    attention: torch.Tensor | None = None  # (B, S) last prompt token's attention, mean over heads
    keys: torch.Tensor | None = None  # (B, kv_heads, S, head_dim) post-RoPE keys
    hidden: torch.Tensor | None = None  # (B, S, D) layer K-1 output after the final norm


@dataclass
class _Call:
    """State of one forward call of the model under the press."""

    cache: Any
    past_len: int
    n_new: int
    clips: list[list[AudioClip]] | None = None  # set on a call that prunes
    offsets: torch.Tensor | None = None  # (B, S) position of each index within its unpadded row
    is_audio: torch.Tensor | None = None  # (B, S)
    valid: torch.Tensor | None = None  # (B, S), False on padding
    layout: CacheLayout | None = None
    hidden: torch.Tensor | None = None
    memo: dict = field(default_factory=dict)

    @property
    def prunes(self) -> bool:
        return self.clips is not None


class PressSession:
    """Installs a token-dropping press on a model for the duration of a ``with`` block."""

    def __init__(self, model: nn.Module, press: "TokenDropPress"):
        self.press = press
        self.family = resolve_family(model)
        self.entry = self.family.entry(model)
        self.layers = self.family.layers(model)
        self.norm = self.family.final_norm(model)
        self.audio_token_id = self.family.audio_token_id(model)
        n_layers = len(self.layers)
        if not 1 <= press.layer < n_layers:
            raise ValueError(
                f"layer={press.layer} is invalid for {self.family.display_name} with {n_layers} decoder "
                f"layers: it must be in [1, {n_layers - 1}] (layer 0 must stay full length)."
            )
        self.k = press.layer
        self.attn_implementation = self.family.decoder(model).config._attn_implementation
        needs = press.needs
        self.recorder = None
        if "attention" in needs or "keys" in needs:
            self.recorder = AttentionRecorder(
                self.layers[self.k - 1].self_attn, want_attention="attention" in needs, want_keys="keys" in needs
            )
        self.want_hidden = "hidden" in needs
        self._layouts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._call: _Call | None = None
        self._handles: list = []

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> "PressSession":
        try:
            self._handles.append(self.entry.register_forward_pre_hook(self._before_call, with_kwargs=True))
            self._handles.append(self.entry.register_forward_hook(self._after_call, with_kwargs=True))
            if self.want_hidden:
                self._handles.append(self.layers[self.k - 1].register_forward_hook(self._capture_hidden))
            for j in range(self.k, len(self.layers)):
                self._handles.append(
                    self.layers[j].register_forward_pre_hook(self._pre_layer_hook(j), with_kwargs=True)
                )
            if self.recorder is not None:
                self.recorder.attach()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.recorder is not None:
            self.recorder.detach()
        self._call = None

    # -- per call --------------------------------------------------------------------------------
    def _before_call(self, module, args, kwargs):
        if self.recorder is not None:
            self.recorder.clear()
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        cache = find_cache(kwargs)
        _refuse_static(cache)
        past_len = int(cache.get_seq_length()) if cache is not None else 0
        if past_len > 0:
            layout = self._layouts.get(cache)
            n_new = input_ids.shape[1] if input_ids is not None else _embeds_len(kwargs)
            self._call = _Call(cache=cache, past_len=past_len, n_new=n_new, layout=layout) if layout else None
            return None
        if input_ids is None:
            raise ValueError(
                "kvprune locates audio by the placeholder token in input_ids; call the model with input_ids, "
                "not inputs_embeds, while a press is active."
            )
        self._call = self._start_prefill(input_ids, kwargs.get("attention_mask"), cache)
        return None

    def _after_call(self, module, args, kwargs, output):
        call, self._call = self._call, None
        if call is not None and call.layout is not None:
            cache = output_cache(output) or call.cache
            if cache is not None:
                self._layouts[cache] = call.layout
        if self.recorder is not None:
            self.recorder.clear()
        return None

    def _start_prefill(self, input_ids, attention_mask, cache) -> _Call | None:
        press = self.press
        clips = find_clips(input_ids, self.audio_token_id, press.ratio)
        offsets = _left_offsets(attention_mask, input_ids)
        if not any(c.n_keep < c.length for row in clips for c in row):
            # ratio 0 or no audio: the model runs exactly as without the press
            press._record(clips, [[c.positions() for c in row] for row in clips], offsets)
            return None
        is_audio = input_ids == self.audio_token_id
        valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(is_audio)
        call = _Call(
            cache=cache, past_len=0, n_new=input_ids.shape[1], clips=clips, offsets=offsets,
            is_audio=is_audio, valid=valid,
        )
        if self.recorder is not None:
            self.recorder.armed = True
        return call

    def _capture_hidden(self, module, args, output):
        call = self._call
        if call is not None and call.prunes and call.layout is None:
            call.hidden = output[0] if isinstance(output, tuple) else output

    # -- decoder layers >= K ---------------------------------------------------------------------
    def _pre_layer_hook(self, layer_idx: int):
        def hook(module, args, kwargs):
            call = self._call
            if call is None:
                return None
            if call.prunes and call.layout is None:
                self._prune(call, args[0] if args else kwargs["hidden_states"])
            slots = call.layout[layer_idx]
            if slots is None:
                return None
            if call.prunes:
                return self._prefill_arguments(call, layer_idx, slots, args, kwargs)
            return self._continuation_arguments(call, slots, args, kwargs)

        return hook

    def _prune(self, call: _Call, hidden: torch.Tensor) -> None:
        """Ask the press which audio tokens to keep and lay out the kept slots of layers >= K."""
        evidence = Evidence(is_audio=call.is_audio, valid=call.valid)
        if self.recorder is not None:
            evidence.attention = self.recorder.attention_row
            evidence.keys = self.recorder.keys
            self.recorder.clear()
        if self.want_hidden:
            evidence.hidden = self.norm(call.hidden)
            call.hidden = None
        keep = ~call.is_audio.to(hidden.device)
        kept_per_row = []
        for row in call.clips:
            kept = [self.press.select(clip, evidence).to(keep.device) for clip in row]
            for clip, indices in zip(row, kept):
                keep[clip.row, indices] = True
            kept_per_row.append(kept)
        self.press._record(call.clips, kept_per_row, call.offsets)
        slots = SlotMap.from_keep_mask(keep)
        call.layout = CacheLayout([None] * self.k + [slots] * (len(self.layers) - self.k))

    def _prefill_arguments(self, call, layer_idx, slots: SlotMap, args, kwargs):
        if layer_idx == self.k:
            hidden = args[0] if args else kwargs.pop("hidden_states")
            args = (_gather_seq(hidden, slots.index), *args[1:])
        memo = call.memo
        key = ("prefill", id(slots), id(kwargs.get("attention_mask")), id(kwargs.get("position_embeddings")))
        if key not in memo:
            memo[key] = self._gather_prefill_kwargs(kwargs, slots)
        kwargs.update(memo[key])
        return args, kwargs

    def _gather_prefill_kwargs(self, kwargs, slots: SlotMap) -> dict:
        updates = {}
        cos_sin = kwargs.get("position_embeddings")
        if cos_sin is not None:
            updates["position_embeddings"] = tuple(_gather_seq(t, slots.index) for t in cos_sin)
        position_ids = kwargs.get("position_ids")
        if position_ids is not None:
            # flash attention reads gaps in position ids as packed sequences; RoPE is already in cos/sin
            updates["position_ids"] = None if is_flash(self.attn_implementation) else _gather_seq(position_ids, slots.index)
        if "attention_mask" in kwargs:
            updates["attention_mask"] = restrict_mask(
                kwargs["attention_mask"],
                cols=slots,
                rows=slots,
                query_index=slots.index,
                attn_implementation=self.attn_implementation,
                dtype=_dtype_of(kwargs),
            )
        return updates

    def _continuation_arguments(self, call, slots: SlotMap, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None and not slots.has_filler:
            return None
        total = call.past_len + call.n_new
        key = ("cont", id(slots), id(mask))
        if key not in call.memo:
            device = slots.index.device
            query_index = torch.arange(call.past_len, total, device=device)[None]
            call.memo[key] = restrict_mask(
                mask,
                cols=slots.columns(total),
                rows=None,
                query_index=query_index,
                attn_implementation=self.attn_implementation,
                dtype=_dtype_of(kwargs),
            )
        kwargs["attention_mask"] = call.memo[key]
        return args, kwargs


def _gather_seq(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Gather (B|1, S, ...) or (B|1, S) tensors along the sequence axis with a (B, L) index."""
    batch = index.shape[0]
    if tensor.dim() == 2:
        return tensor.expand(batch, -1).gather(1, index.to(tensor.device))
    tensor = tensor.expand(batch, *tensor.shape[1:])
    idx = index.to(tensor.device).view(batch, -1, *([1] * (tensor.dim() - 2))).expand(-1, -1, *tensor.shape[2:])
    return tensor.gather(1, idx)


def _left_offsets(attention_mask, input_ids) -> torch.Tensor:
    """Per position, its index within the row's prompt not counting padding (HF's position ids)."""
    if attention_mask is None:
        return torch.arange(input_ids.shape[1]).expand(input_ids.shape[0], -1)
    return (attention_mask.long().cpu().cumsum(dim=1) - 1).clamp(min=0)


def _dtype_of(kwargs) -> torch.dtype:
    cos_sin = kwargs.get("position_embeddings")
    return cos_sin[0].dtype if cos_sin is not None else torch.get_default_dtype()


def _embeds_len(kwargs) -> int:
    embeds = kwargs.get("inputs_embeds")
    return embeds.shape[1] if embeds is not None else 1


def _refuse_static(cache) -> None:
    if cache is not None and type(cache).__name__ in ("StaticCache", "HybridCache", "SlidingWindowCache"):
        raise NotImplementedError(
            f"kvprune cannot prune into a {type(cache).__name__}: its mask spans the whole preallocated "
            "length while pruned layers hold fewer keys. Use the default dynamic cache "
            "(do not set cache_implementation='static')."
        )
