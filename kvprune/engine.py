"""The pruning engine: hooks on a stock Hugging Face model that shorten what its layers see and keep.

One ``PressSession`` is live per ``with press(model) as run:`` block; what it prunes is recorded
on the ``PressRun`` it yields. It serves two kinds of press, alone or together: at most one
*token-dropping* press (drops audio tokens from the hidden states before decoder layer K) and any
number of *cache* presses (compress each layer's KV cache once that layer has run its prefill).
Presses are duck-typed: the engine reads ``kind``, ``ratio``, ``layer`` and ``needs`` and calls
``parts()``, ``select()`` and ``score()``; of cache presses it also reads ``scope``, ``window``,
``query_rows`` and ``headwise`` and calls ``keep()`` and ``choose()``, and nothing else. Per forward
call of the model:

1. The entry module's pre-hook reads ``input_ids`` and the cache. A call that starts from an empty
   cache is a *prefill*: the audio clips are found and the call is marked for pruning if any press
   has something to remove. A call that continues a cache pruned earlier reuses its layout.
2. Token dropping: layers ``0..K-1`` run untouched; layer K-1's attention is recorded (keys and the
   last query's attention row) and its output kept, if the press needs them. At layer K the press
   picks the audio tokens to keep and the hidden states, rotary embeddings, position ids and
   attention mask are gathered to the kept slots; every later layer gets the same gathered
   arguments, so layers >= K and their cache hold only the kept tokens.
3. Cache compression: after layer j's prefill, each cache press scores the entries of that layer's
   cache (from the layer's keys and, if it needs them, the queries of the last prompt positions,
   recorded during the layer's attention) and ``kvprune.compression`` keeps the best of its
   candidates, gathering keys and values in place.
4. The layout (which prompt positions each layer's cache holds) outlives the call, keyed by the
   cache object; on later calls (decoding, another turn) every layer whose cache differs from the
   full prompt gets the attention mask restricted to its slots. Nothing else changes, because kept
   tokens keep their original positions. On a static cache (``cache_implementation="static"``) the
   layout lives in the cache instead, each layer at its own static length, and decoding keeps no
   Python state, so that it compiles (``kvprune/static_cache.py``).

Cache layer 0 always stays full length: HF sizes masks and positions from it, which is why pruning
at layer 0 is refused.

One model holds at most one session at a time: nesting a second press on the same model is refused
with a message that says how to compose presses instead (``ComposedPress``); one press may serve
several models at once, each in its own session. Tensors the engine and the presses create follow
the device of the tensor they index, so a model split over devices (``device_map``) prunes exactly
as on one device.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from . import static_cache
from .attention_probe import AttentionRecorder
from .clips import AudioClip, clips_of
from .compat import find_cache, output_cache
from .compression import LayerPrefill, PrefillCompression, sample_keys
from .masks import causal_mask, is_flash, restrict_mask
from .models import resolve_family
from .models.layer_io import by_name
from .run import PressRun
from .slots import CacheLayout, SlotMap, to_device


@dataclass
class Evidence:
    """What layer K-1 computed for the prompt, for presses to score audio tokens with (batch-first).

    The masks come twice: on the model's device for tensor work, and on the host for bookkeeping
    (counts, positions) that would otherwise have to wait for the device in the middle of a prefill.
    """

    is_audio: torch.Tensor  # (B, S) bool
    valid: torch.Tensor  # (B, S) bool, False on padding
    host_is_audio: torch.Tensor  # (B, S) bool, on the CPU
    host_valid: torch.Tensor  # (B, S) bool, on the CPU
    attention: torch.Tensor | None = None  # (B, S) last prompt token's attention, mean over heads
    keys: torch.Tensor | None = None  # (B, kv_heads, S, head_dim) post-RoPE keys
    hidden: torch.Tensor | None = None  # (B, S, D) layer K-1 output after the final norm
    #: per row, a hash of its token ids (padding left out): what presses that draw at random seed with,
    #: so that two samples differ while a row alone or in a batch draws the same
    sample_keys: tuple[int, ...] = ()

    @classmethod
    def for_prompt(
        cls, is_audio: torch.Tensor, valid: torch.Tensor, host_is_audio: torch.Tensor | None = None,
        host_ids: torch.Tensor | None = None,
    ) -> "Evidence":
        host_is_audio = is_audio.cpu() if host_is_audio is None else host_is_audio
        host_valid = valid.cpu()
        keys = sample_keys(host_ids, host_valid) if host_ids is not None else ()
        return cls(is_audio=is_audio, valid=valid, host_is_audio=host_is_audio, host_valid=host_valid, sample_keys=keys)

    def unpruned_positions(self) -> list[torch.Tensor]:
        """Per row, on the device, the positions no token-dropping press may drop (all but audio)."""
        return [to_device((~row).nonzero().flatten(), self.is_audio.device) for row in self.host_is_audio]

    def masks_only(self) -> "Evidence":
        """The same prompt without layer K-1's tensors (which can be large)."""
        return Evidence(self.is_audio, self.valid, self.host_is_audio, self.host_valid, sample_keys=self.sample_keys)


def drop_slots(press, clips: list[list[AudioClip]], evidence: Evidence, unpruned: list[torch.Tensor], prompt_len: int):
    """A token-dropping press's decision for a prompt: the slots layers >= K keep, and per row and
    clip the positions it chose. Nothing here waits for the device (shapes are known on the host):
    a stall in the middle of the prefill would expose the host's launch cost of every later layer."""
    kept_per_row, rows = [], []
    for row_clips, row_unpruned in zip(clips, unpruned):
        kept = [press.select(clip, evidence).to(row_unpruned.device) for clip in row_clips]
        kept_per_row.append(kept)
        rows.append(torch.cat([row_unpruned, *kept]).sort().values)
    return SlotMap.from_rows(rows, prompt_len), kept_per_row


@dataclass
class _Call:
    """State of one forward call of the model under the press."""

    cache: Any
    past_len: int
    n_new: int
    layout: CacheLayout | None = None
    padding: torch.Tensor | None = None  # the call's (B, past + new) attention mask, if it had one
    # set on a prefill that prunes:
    clips: list[list[AudioClip]] | None = None
    offsets: torch.Tensor | None = None  # (B, S) position of each index within its unpadded row
    evidence: Evidence | None = None  # masks now; layer K-1's tensors once recorded
    unpruned: list[torch.Tensor] | None = None  # per row, on the device: positions no press may drop
    drop_pending: bool = False  # the token-dropping press has yet to choose (before layer K)
    drop_slots: SlotMap | None = None  # hidden-state slots of layers >= K during this prefill
    kept_counts: list[list[int]] | None = None  # per row and clip, the audio tokens layers >= K hold
    compression: PrefillCompression | None = None  # set when a cache press compresses this prefill
    hidden: torch.Tensor | None = None
    memo: dict = field(default_factory=dict)

    @property
    def prefill(self) -> bool:
        return self.clips is not None


class PressSession:
    """Installs a press (and the parts of a composed one) on a model for the duration of a ``with``
    block, which gets the ``PressRun`` that records what was pruned."""

    def __init__(self, model: nn.Module, press):
        parts = press.parts()
        unknown = sorted({p.kind for p in parts} - {"token", "cache"})
        if unknown:
            raise ValueError(f"press kind {unknown[0]!r} is unknown to the engine: a press is a TokenDropPress or a CachePress.")
        droppers = [p for p in parts if p.kind == "token"]  # at most one: ComposedPress sees to it
        self.compressors = [p for p in parts if p.kind == "cache"]
        self.dropper = droppers[0] if droppers else None
        self.run = PressRun(press)
        self.prunes = any(part.ratio > 0 for part in parts)  # else the model runs as without the press
        self.family = resolve_family(model)
        self.entry = self.family.entry(model)
        self.layers = self.family.layers(model)
        self.norm = self.family.final_norm(model)
        self.audio_token_id = self.family.audio_token_id(model)
        self.decoder_config = self.family.decoder(model).config
        self.attn_implementation = self.decoder_config._attn_implementation
        self.io = self.family.layer_io
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
        self.recorders = self._recorders()
        self.want_hidden = self.dropper is not None and "hidden" in self.dropper.needs
        self._layouts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._call: _Call | None = None
        self._handles: list = []

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> PressRun:
        _claim(self)
        try:
            self._hook(self.entry.register_forward_pre_hook(self._before_call, with_kwargs=True))
            self._hook(self.entry.register_forward_hook(self._after_call, with_kwargs=True))
            if self.want_hidden:
                self._hook(self.layers[self.k - 1].register_forward_hook(self._capture_hidden))
            first_compressed = min((p.layer for p in self.compressors), default=len(self.layers))
            # only layers whose cache can differ from the prompt need their arguments adjusted
            for j in range(min(self.k, first_compressed), len(self.layers)):
                self._hook(self.layers[j].register_forward_pre_hook(self._before_layer(j), with_kwargs=True))
            for j in range(first_compressed, len(self.layers)):
                self._hook(self.layers[j].register_forward_hook(self._after_layer(j), with_kwargs=True))
            for recorder in self.recorders.values():
                recorder.attach()
        except BaseException:
            self.close()
            raise
        return self.run

    def __exit__(self, *exc) -> None:
        self.close()

    def layout_of(self, cache) -> CacheLayout | None:
        """Which prompt positions each layer of ``cache`` holds after a pruning prefill on it (a
        dynamic cache; None when the prefill pruned nothing): what decoding on it must mask by."""
        return self._layouts.get(cache)

    def _hook(self, handle) -> None:
        self._handles.append(handle)

    def close(self) -> None:
        _release(self)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for recorder in self.recorders.values():
            recorder.detach()
        self._call = None

    def _recorders(self) -> dict[int, AttentionRecorder]:
        """One recorder per attention module whose prefill a press reads: layer K-1 for the
        token-dropping press's attention row or keys, every layer a cache press compresses for
        the queries it scores with."""
        wants: dict[int, dict] = {}
        needs = self.dropper.needs if self.dropper else frozenset()
        if "attention" in needs or "keys" in needs:
            wants[self.k - 1] = dict(attention_row="attention" in needs, keys="keys" in needs)
        for press in self.compressors:
            if "queries" in press.needs:
                for j in range(press.layer, len(self.layers)):
                    want = wants.setdefault(j, {})
                    want["query_rows"] = max(want.get("query_rows", 0), press.query_rows)
        self.query_layers = {j for j, want in wants.items() if want.get("query_rows")}
        return {j: AttentionRecorder(self.layers[j].self_attn, **want) for j, want in wants.items()}

    # -- per call --------------------------------------------------------------------------------
    def _before_call(self, module, args, kwargs):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        cache = find_cache(kwargs)
        if static_cache.is_static(cache):
            return self._before_static_call(input_ids, cache, args, kwargs)
        for recorder in self.recorders.values():
            recorder.clear()
        past_len = int(cache.get_seq_length()) if cache is not None else 0
        if past_len > 0:
            layout = self._layouts.get(cache)
            n_new = input_ids.shape[1] if input_ids is not None else _embeds_len(kwargs)
            if layout:
                self._check_window(past_len + n_new)
            padding = kwargs.get("attention_mask")
            self._call = _Call(cache=cache, past_len=past_len, n_new=n_new, layout=layout, padding=padding) if layout else None
            return None
        self._call = self._start_prefill(_prompt_ids(input_ids), kwargs.get("attention_mask"), cache)
        return None

    def _before_static_call(self, input_ids, cache, args, kwargs):
        """A call on a static cache. Its prefill prunes into layers of their own lengths
        (``static_cache.adopt``); decoding and later turns keep no Python state at all, so that they
        compile: each pruned layer's mask comes from the cache itself (``static_cache.layer_mask``)."""
        n_new = input_ids.shape[1] if input_ids is not None else _embeds_len(kwargs)
        if static_cache.holds_tokens(cache, n_new):
            if self._call is not None:  # left by a call that raised; never set while decoding
                self._call = None
            if n_new > 1 and static_cache.is_frozen(cache):  # a later turn, never compiled
                static_cache.check_room(cache, n_new)
            return None
        if self.prunes:
            static_cache.check_prunable(cache, self.family.display_name, self.kv_sources)
        for recorder in self.recorders.values():
            recorder.clear()
        input_ids, mask = _prompt_ids(input_ids), kwargs.get("attention_mask")
        self._call = self._start_prefill(input_ids, static_cache.prompt_padding(mask, input_ids.shape[1]), cache)
        if self._call is None:  # nothing to prune: the stock static cache, untouched
            return None
        static_cache.adopt(cache)
        kwargs["attention_mask"] = static_cache.prompt_mask(mask, input_ids.shape[1])
        return args, kwargs

    def _after_call(self, module, args, kwargs, output):
        call = self._call
        if call is None:  # nothing was pruned (and, decoding, nothing may change: it may be compiled)
            return None
        self._call = None
        if call.layout is not None and call.layout.pruned:
            cache = output_cache(output)
            cache = call.cache if cache is None else cache  # a Cache may be falsy (len 0): compare to None
            if static_cache.is_static(cache):
                static_cache.freeze(cache, call.layout, call.n_new)
            elif cache is not None:
                self._layouts[cache] = call.layout
        for recorder in self.recorders.values():
            recorder.clear()
        return None

    def _start_prefill(self, input_ids, attention_mask, cache) -> _Call | None:
        drop_ratio = self.dropper.ratio if self.dropper else 0.0
        keep_rule = self.dropper.keep_rule if self.dropper else "round"
        host_ids = input_ids.cpu()  # before the encoder runs: no stall
        host_is_audio = host_ids == self.audio_token_id
        clips = clips_of(host_is_audio, drop_ratio, keep_rule)
        offsets = _left_offsets(attention_mask, input_ids)
        drops = any(c.n_keep < c.length for row in clips for c in row)
        self.run.start_prefill(tuple(input_ids.shape))
        if not drops:  # no token-dropping press, ratio 0 or no audio: every audio token is kept
            self.run.record_kept(clips, [[c.positions() for c in row] for row in clips], offsets)
        has_audio = any(row for row in clips)
        compresses = has_audio and any(p.ratio > 0 for p in self.compressors)
        if not drops and not compresses:  # the model runs exactly as without the presses
            return None
        self._check_window(input_ids.shape[1])
        is_audio = input_ids == self.audio_token_id
        valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(is_audio)
        evidence = Evidence.for_prompt(is_audio, valid, host_is_audio, host_ids)
        for j, recorder in self.recorders.items():  # record only what this prefill's presses will read
            recorder.armed = (drops and j == self.k - 1) or (compresses and j in self.query_layers)
        return _Call(
            cache=cache, past_len=0, n_new=input_ids.shape[1], layout=CacheLayout([None] * len(self.layers)),
            clips=clips, offsets=offsets, evidence=evidence, drop_pending=drops,
            unpruned=evidence.unpruned_positions() if drops else None,
            compression=PrefillCompression(host_ids, evidence.host_valid, clips, offsets, valid) if compresses else None,
        )

    def _check_window(self, length: int) -> None:
        """Sliding-window layers keep only their last window of tokens; a pruned one would evict by
        count what the mask places by position, so pruning stays exact only within one window."""
        if self.window is not None and length >= self.window:
            raise ValueError(
                f"{self.family.display_name}: prompt and generated tokens reach {length}, but its sliding-window "
                f"layers hold {self.window - 1} tokens; kvprune prunes them exactly only while everything fits one "
                "window. Use a shorter prompt or fewer new tokens."
            )

    def _capture_hidden(self, module, args, output):
        call = self._call
        if call is not None and call.drop_pending:
            call.hidden = self.io.stream(output, self.decoder_config)

    # -- before each decoder layer ---------------------------------------------------------------
    def _before_layer(self, layer_idx: int):
        def hook(module, args, kwargs):
            call = self._call
            if call is None:
                mask = static_cache.layer_mask(kwargs, layer_idx, self.attn_implementation)
                if mask is None:
                    return None
                kwargs["attention_mask"] = mask
                return args, kwargs
            args, kwargs = by_name(self.layers[layer_idx], args, kwargs)
            if call.prefill:
                if layer_idx == self.k and call.drop_pending:
                    self._drop(call)
                if call.drop_slots is None or layer_idx < self.k:
                    return None
                return self._prefill_arguments(call, layer_idx, args, kwargs)
            slots = call.layout[layer_idx]
            return None if slots is None else self._continuation_arguments(call, slots, args, kwargs)

        return hook

    def _drop(self, call: _Call) -> None:
        """Ask the token-dropping press which audio tokens to keep; lay out the kept slots."""
        evidence = call.evidence
        recorder = self.recorders.get(self.k - 1)
        if recorder is not None:
            evidence.attention = recorder.attention_row
            evidence.keys = recorder.keys
            recorder.clear()
        if self.want_hidden:
            evidence.hidden = self.norm(call.hidden)
            call.hidden = None
        call.drop_slots, kept = drop_slots(self.dropper, call.clips, evidence, call.unpruned, call.n_new)
        self.run.record_kept(call.clips, kept, call.offsets)
        self.run.record_output_slots(call.drop_slots.index, call.drop_slots.valid)
        call.kept_counts = [[len(k) for k in row] for row in kept]
        call.drop_pending = False
        call.evidence = evidence.masks_only()
        for j in range(self.k, len(self.layers)):
            call.layout.layers[j] = call.drop_slots

    def _prefill_arguments(self, call, layer_idx, args, kwargs):
        slots = call.drop_slots
        if layer_idx == self.k:
            hidden = args[0] if args else kwargs.pop("hidden_states")
            args = (_gather_seq(hidden, slots.index, self.io.hidden_axis), *args[1:])
        key = ("prefill", id(kwargs.get("attention_mask")), id(kwargs.get("position_embeddings")))
        if key not in call.memo:
            call.memo[key] = self._gather_prefill_kwargs(kwargs, slots)
        kwargs.update(call.memo[key])
        for name in self.io.token_args:  # a different tensor for every layer
            if kwargs.get(name) is not None:
                kwargs[name] = _gather_seq(kwargs[name], slots.index)
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
        if mask is not None and mask.dim() == 4 and mask.shape[-1] != total:
            # HF sized it from a pruned layer's cache (Gemma-3n: its first full-attention layer)
            mask = causal_mask(call.padding, call.past_len, call.n_new, mask.shape[0], mask.dtype, mask.device)
        key = ("continuation", id(slots), id(mask))
        if key not in call.memo:
            query_index = torch.arange(call.past_len, total, device=slots.index.device)[None]
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

    # -- after each decoder layer: cache compression ---------------------------------------------
    def _after_layer(self, layer_idx: int):
        def hook(module, args, kwargs, output):
            call = self._call
            if call is None or not call.prefill:
                return None
            source = self.kv_sources.get(layer_idx)
            if source is not None:  # it holds no cache: it attends to its source layer's, as compressed
                call.layout.layers[layer_idx] = call.layout[source]
                return None
            args, kwargs = by_name(self.layers[layer_idx], args, kwargs)  # its rotary embedding may be positional
            cache = find_cache(kwargs)
            if cache is None:
                return None  # no cache to compress (use_cache=False)
            recorder = self.recorders.get(layer_idx)
            queries, scaling = recorder.take_queries() if recorder is not None else (None, None)
            for press in self.compressors:
                if layer_idx >= press.layer and press.ratio > 0:
                    layer = self._layer_prefill(call, cache.layers[layer_idx], layer_idx, queries, scaling, kwargs)
                    self._compress(call, layer, press)
            return None

        return hook

    def _layer_prefill(self, call: _Call, cache_layer, layer_idx: int, queries, scaling, kwargs) -> LayerPrefill:
        """What layer ``layer_idx``'s prefill left for cache presses: its cache, which prompt entries
        the cache holds, which prompt rows the layer computed (its queries) and their rotary embedding."""
        batch, device = len(call.clips), cache_layer.keys.device
        dropped = call.drop_slots is not None and layer_idx >= self.k
        full = SlotMap.identity(batch, call.n_new, device)
        return LayerPrefill(
            index=layer_idx, cache=cache_layer, slots=call.layout[layer_idx] or full,
            query_slots=call.drop_slots if dropped else full,
            clip_entries=call.kept_counts if dropped else [[clip.length for clip in row] for row in call.clips],
            kv_groups=self.kv_groups, queries=queries, scaling=scaling, rope=kwargs.get("position_embeddings"),
            rope_frequencies=_rope_frequencies(self.rotary, self.layer_types[layer_idx]),
        )

    def _compress(self, call: _Call, layer: LayerPrefill, press) -> None:
        """Keep each row's best candidates of one layer's cache (and everything else), in place."""
        slots, candidates, kept = call.compression.compress(press, layer, self.cache_layers)
        call.layout.layers[layer.index] = slots
        earlier = self.run.layer_stats.get(layer.index)  # composed cache presses: report the layer's first count
        self.run.record_layer(layer.index, [s.audio_tokens for s in earlier] if earlier else candidates, kept)


#: the session live on each model, keyed by the module the engine hooks (a full Qwen2.5-Omni model
#: and its thinker share one): a second press on the same model would stack hooks that each assume
#: they see the whole prompt
_ACTIVE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _claim(session: PressSession) -> None:
    active = _ACTIVE.get(session.entry)
    if active is not None:
        raise RuntimeError(
            f"a press is already active on this model ({_describe(active.run.press)}), so "
            f"{_describe(session.run.press)} cannot be nested inside it: one model runs one press at a time. "
            "To run several presses at once, compose them into one: ComposedPress([FramePress(ratio=0.5), "
            "KNormPress(ratio=0.3)]), or the method spec 'frame+knorm:ratio=0.3' (at most one token-dropping press "
            "per composition, with any number of cache presses)."
        )
    _ACTIVE[session.entry] = session


def _release(session: PressSession) -> None:
    if _ACTIVE.get(session.entry) is session:
        del _ACTIVE[session.entry]


def _describe(press) -> str:
    return " + ".join(type(part).__name__ for part in press.parts())


def validate_press(model: nn.Module, press, static: bool = False) -> None:
    """Raise the error ``with press(model):`` would raise (unknown family, a layer out of range,
    presses that cannot run together), and with ``static`` the one generating on a static cache
    would raise (a model whose static cache cannot hold a pruned prompt), without installing
    anything on the model: what the sweep checks for every method before its first sample."""
    session = PressSession(model, press)
    if static and session.prunes:
        static_cache.check_model(session.entry.config, session.family.display_name, session.kv_sources)


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


def _gather_seq(tensor: torch.Tensor, index: torch.Tensor, axis: int = 1) -> torch.Tensor:
    """Gather a tensor along its sequence ``axis`` with a (B, L) index; the batch axis comes just
    before it, of size B or 1: (B|1, S), (B|1, S, ...), or (n, B|1, S, ...) for Gemma-3n's streams."""
    batch = index.shape[0]
    shape = list(tensor.shape)
    shape[axis - 1] = batch
    tensor = tensor.expand(*shape)
    view = [1] * tensor.dim()
    view[axis - 1], view[axis] = batch, index.shape[1]
    shape[axis] = index.shape[1]
    return tensor.gather(axis, index.to(tensor.device).view(view).expand(*shape))


def _left_offsets(attention_mask, input_ids) -> torch.Tensor:
    """Per position, its index within the row's prompt not counting padding (HF's position ids)."""
    if attention_mask is None:
        return torch.arange(input_ids.shape[1]).expand(input_ids.shape[0], -1)
    return (attention_mask.long().cpu().cumsum(dim=1) - 1).clamp(min=0)


def _dtype_of(kwargs) -> torch.dtype:
    cos_sin = kwargs.get("position_embeddings")
    return cos_sin[0].dtype if cos_sin is not None else torch.get_default_dtype()


def _prompt_ids(input_ids):
    if input_ids is None:
        raise ValueError(
            "kvprune locates audio by the placeholder token in input_ids; call the model with input_ids, "
            "not inputs_embeds, while a press is active."
        )
    return input_ids


def _embeds_len(kwargs) -> int:
    embeds = kwargs.get("inputs_embeds")
    return embeds.shape[1] if embeds is not None else 1


def _check_kv_sharing(k: int, sources: dict[int, int], name: str) -> None:
    """A layer that attends to another layer's cache must see the tokens that layer kept."""
    split = sorted(source for layer, source in sources.items() if source < k <= layer)
    if split:
        raise ValueError(
            f"layer={k} is invalid for {name}: its layers {min(sources)}.. attend to the keys and values of layers "
            f"{sorted(set(sources.values()))}, which must hold the same tokens; prune at layer {split[0]} or earlier."
        )


def _rope_frequencies(rotary, layer_type: str) -> torch.Tensor | None:
    """The inverse frequencies of the rotary embedding a layer of ``layer_type`` is given: the model's
    one set (``inv_freq``), or its attention type's (Gemma-3n's sliding layers turn at another base:
    ``sliding_attention_inv_freq``); None where the model exposes none. Read when used, as dynamic
    RoPE variants replace them."""
    shared = getattr(rotary, "inv_freq", None)
    return shared if shared is not None else getattr(rotary, f"{layer_type}_inv_freq", None)


def _smallest_window(config, first_layer: int) -> int | None:
    """The smallest sliding window among layers ``first_layer``.. (None: no sliding-window layer there)."""
    types = getattr(config, "layer_types", None) or []
    window = getattr(config, "sliding_window", None)
    sliding = [j for j, kind in enumerate(types) if kind == "sliding_attention" and j >= first_layer]
    return window if sliding and window else None
