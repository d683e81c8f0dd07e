"""``PressSession``: one press on one model for one ``with`` block, its hooks on the model's entry
module and decoder layers (the package's docstring says what they do, call by call). Each forward call
is one of the stages of ``kvprune.engine.stages``: a prefill that prunes, or a call that continues a
cache pruned earlier; the hooks read only what the stage holds."""

from __future__ import annotations

import weakref

import torch
import torch.nn as nn

from . import static_cache
from .attention_probe import AttentionRecorder
from .stages import Continuation, DroppedTokens, PendingDrop, PromptOnHost, PruningPrefill
from .clips import clips_of, placeholder_kinds, scope_mask, scope_modalities
from ..compat import find_cache, output_cache
from .compression import LayerPrefill, PrefillCompression, has_candidates
from .layer_arguments import continuation_arguments, prefill_arguments
from ..models.layer_io import by_name
from .press_plan import PressPlan
from .outcome import PressOutcome
from .slots import CacheSlots, SlotMap
from .token_evidence import Evidence, drop_slots


class PressSession(PressPlan):
    """Installs a press (and the parts of a composed one) on a model for the duration of a ``with``
    block, which gets the ``PressOutcome`` that records what was pruned: its plan (the model's parts and
    checks, ``kvprune.engine.press_plan``) with the hooks in place."""

    def __init__(self, model: nn.Module, press):
        super().__init__(model, press)
        self.outcome = PressOutcome(press)
        self.recorders = self._recorders()
        self.want_hidden = self.dropper is not None and "hidden" in self.dropper.needs
        self._cache_slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._call: PruningPrefill | Continuation | None = None  # the stage of the call under way (``stages``)
        self._pending: PromptOnHost | None = None  # a prefill's prompt, until decoder layer 0 sets the prefill up
        self._handles: list = []

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> PressOutcome:
        _claim(self)
        try:
            self._hook(self.entry.register_forward_pre_hook(self._before_call, with_kwargs=True))
            self._hook(self.entry.register_forward_hook(self._after_call, with_kwargs=True))
            self._hook(self.layers[0].register_forward_pre_hook(self._set_up_prefill))
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
        return self.outcome

    def __exit__(self, *exc) -> None:
        self.close()

    def slots_of(self, cache) -> CacheSlots | None:
        """Which prompt positions each layer of ``cache`` holds after a pruning prefill on it (a
        dynamic cache; None when the prefill pruned nothing): what decoding on it must mask by."""
        return self._cache_slots.get(cache)

    def _hook(self, handle) -> None:
        self._handles.append(handle)

    def close(self) -> None:
        _release(self)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for recorder in self.recorders.values():
            recorder.detach()
        self._call = self._pending = None

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
        self._pending = None
        past_len = int(cache.get_seq_length()) if cache is not None else 0
        if past_len > 0:
            cache_slots = self._cache_slots.get(cache)
            n_new = input_ids.shape[1] if input_ids is not None else _embeds_len(kwargs)
            if cache_slots:
                self.check_window(past_len + n_new)
            padding = kwargs.get("attention_mask")
            self._call = Continuation(cache, past_len, n_new, cache_slots, padding) if cache_slots else None
            return None
        # a prefill: its prompt is read to the host now, before the model queues its audio encoder; the
        # press's bookkeeping on it waits for decoder layer 0, so that the host does it while the GPU encodes
        self._call = None
        self._pending = PromptOnHost(_prompt_ids(input_ids), kwargs.get("attention_mask"), cache)
        return None

    def _set_up_prefill(self, module, args) -> None:
        """Decoder layer 0's pre-hook: the pending prefill's pruning is set up (or found to be needless). It runs
        in every decoding step too, where it only reads: a compiled step sees no Python state change."""
        if self._pending is not None:
            prompt, self._pending = self._pending, None
            self._call = self._start_prefill(prompt)

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
        self._call = self._start_prefill(PromptOnHost(input_ids, static_cache.prompt_padding(mask, input_ids.shape[1]), cache))
        if self._call is None:  # nothing to prune: the stock static cache, untouched
            return None
        static_cache.adopt(cache)
        kwargs["attention_mask"] = static_cache.prompt_mask(mask, input_ids.shape[1])
        return args, kwargs

    def _after_call(self, module, args, kwargs, output):
        self._pending = None
        call = self._call
        if call is None:  # nothing was pruned (and, decoding, nothing may change: it may be compiled)
            return None
        self._call = None
        if call.cache_slots.pruned:
            cache = output_cache(output)
            cache = call.cache if cache is None else cache  # a Cache may be falsy (len 0): compare to None
            if static_cache.is_static(cache):
                static_cache.freeze(cache, call.cache_slots, call.n_new)
            elif cache is not None:
                self._cache_slots[cache] = call.cache_slots
        for recorder in self.recorders.values():
            recorder.clear()
        return None

    def _start_prefill(self, prompt: PromptOnHost) -> PruningPrefill | None:
        """The prefill's pruning, from its prompt (read to the host already: nothing here waits for the
        device); None if nothing is to be pruned."""
        input_ids, attention_mask, cache, host_ids = prompt.input_ids, prompt.attention_mask, prompt.cache, prompt.host_ids
        drop_scope = scope_modalities(self.dropper.scope if self.dropper else "audio")
        kinds = placeholder_kinds(host_ids, self.placeholder_ids)
        clips = clips_of(kinds, self.dropper.keep if self.dropper else None, drop_scope)
        drop_clips = [[c for c in row if c.modality in drop_scope] for row in clips]
        offsets = prompt.offsets()
        drops = any(c.n_keep < c.length for row in drop_clips for c in row)
        self.outcome.start_prefill(tuple(input_ids.shape))
        if not drops:  # no token-dropping press, ratio 0 or nothing in its scope: every token is kept
            self.outcome.record_kept(drop_clips, [[c.positions() for c in row] for row in drop_clips], offsets)
        scope = self.compressors[0].scope if self.compressors else "audio"  # composed cache presses share one
        compresses = any(p.prunes for p in self.compressors) and has_candidates(clips, scope)
        if not drops and not compresses:  # the model runs exactly as without the presses
            return None
        self.check_window(input_ids.shape[1])
        self.check_visual_layers(drops and any(c.modality != "audio" for row in clips for c in row))
        candidates = scope_mask(placeholder_kinds(input_ids, self.placeholder_ids), drop_scope)
        valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(candidates)
        host_valid = prompt.host_mask.bool() if prompt.host_mask is not None else torch.ones_like(host_ids, dtype=torch.bool)
        evidence = Evidence.for_prompt(candidates, valid, scope_mask(kinds, drop_scope), host_ids, host_placeholders=kinds != 0,
                                       host_valid=host_valid)
        for j, recorder in self.recorders.items():  # record only what this prefill's presses will read
            recorder.armed = (drops and j == self.k - 1) or (compresses and j in self.query_layers)
        return PruningPrefill(
            cache=cache, n_new=input_ids.shape[1], cache_slots=CacheSlots([None] * len(self.layers)), clips=clips,
            drop=PendingDrop(drop_clips, offsets, evidence, evidence.unpruned_positions()) if drops else None,
            compression=PrefillCompression(evidence, clips, offsets, kinds, scope)
            if compresses else None,
        )

    def _capture_hidden(self, module, args, output):
        call = self._call
        if isinstance(call, PruningPrefill) and isinstance(call.drop, PendingDrop):
            call.drop.hidden = self.io.stream(output, self.decoder_config)

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
            if isinstance(call, PruningPrefill):
                if layer_idx == self.k and isinstance(call.drop, PendingDrop):
                    self._drop(call, call.drop)
                if call.dropped is None or layer_idx < self.k:
                    return None
                return prefill_arguments(call, layer_idx == self.k, self.io, self.attn_implementation, args, kwargs)
            slots = call.cache_slots[layer_idx]
            return None if slots is None else continuation_arguments(call, slots, self.attn_implementation, args, kwargs)

        return hook

    def _drop(self, call: PruningPrefill, pending: PendingDrop) -> None:
        """Ask the token-dropping press which audio tokens to keep; the prefill's drop is done from here on
        (``DroppedTokens``), its kept slots laid out for layers >= K."""
        evidence = pending.evidence
        recorder = self.recorders.get(self.k - 1)
        if recorder is not None:
            evidence.attention = recorder.attention_row
            evidence.keys = recorder.keys
            recorder.clear()
        if self.want_hidden:
            evidence.hidden = self.norm(pending.hidden)
        slots, kept = drop_slots(self.dropper, pending.clips, evidence, pending.unpruned, call.n_new)
        self.outcome.record_kept(pending.clips, kept, pending.offsets)
        self.outcome.record_output_slots(slots.index, slots.valid)
        kept_counts = [[clip.length for clip in row] for row in call.clips]
        for row_clips, row_kept, counts in zip(pending.clips, kept, kept_counts):
            for clip, positions in zip(row_clips, row_kept):
                counts[clip.index] = len(positions)
        call.drop = DroppedTokens(slots, kept_counts)
        for j in range(self.k, len(self.layers)):
            call.cache_slots.layers[j] = slots

    # -- after each decoder layer: cache compression ---------------------------------------------
    def _after_layer(self, layer_idx: int):
        def hook(module, args, kwargs, output):
            call = self._call
            if not isinstance(call, PruningPrefill):
                return None
            source = self.kv_sources.get(layer_idx)
            if source is not None:  # it holds no cache: it attends to its source layer's, as compressed
                call.cache_slots.layers[layer_idx] = call.cache_slots[source]
                return None
            args, kwargs = by_name(self.layers[layer_idx], args, kwargs)  # its rotary embedding may be positional
            cache = find_cache(kwargs)
            if cache is None:
                return None  # no cache to compress (use_cache=False)
            recorder = self.recorders.get(layer_idx)
            queries, scaling = recorder.take_queries() if recorder is not None else (None, None)
            for press in self.compressors:
                if layer_idx >= press.layer and press.prunes:
                    layer = self._layer_prefill(call, cache.layers[layer_idx], layer_idx, queries, scaling, kwargs)
                    self._compress(call, layer, press)
            return None

        return hook

    def _layer_prefill(self, call: PruningPrefill, cache_layer, layer_idx: int, queries, scaling, kwargs) -> LayerPrefill:
        """What layer ``layer_idx``'s prefill left for cache presses: its cache, which prompt entries
        the cache holds, which prompt rows the layer computed (its queries) and their rotary embedding."""
        batch, device = len(call.clips), cache_layer.keys.device
        dropped = call.dropped if layer_idx >= self.k else None
        full = SlotMap.identity(batch, call.n_new, device)
        return LayerPrefill(
            index=layer_idx, cache=cache_layer, slots=call.cache_slots[layer_idx] or full,
            query_slots=dropped.slots if dropped else full,
            clip_entries=dropped.kept_counts if dropped else call.compression.clip_lengths,
            kv_groups=self.kv_groups, queries=queries, scaling=scaling, rope=kwargs.get("position_embeddings"),
            rope_frequencies=self.rope_frequencies(layer_idx),
        )

    def _compress(self, call: PruningPrefill, layer: LayerPrefill, press) -> None:
        """Keep each row's best candidates of one layer's cache (and everything else), in place."""
        slots, candidates, kept = call.compression.compress(press, layer, self.cache_layers)
        call.cache_slots.layers[layer.index] = slots
        earlier = self.outcome.layer_stats.get(layer.index)  # composed cache presses: report the layer's first count
        self.outcome.record_layer(layer.index, [s.audio_tokens for s in earlier] if earlier else candidates, kept)


#: the session live on each model, keyed by the module the engine hooks (a full Qwen2.5-Omni model
#: and its thinker share one): a second press on the same model would stack hooks that each assume
#: they see the whole prompt
_ACTIVE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _claim(session: PressSession) -> None:
    active = _ACTIVE.get(session.entry)
    if active is not None:
        raise RuntimeError(
            f"a press is already active on this model ({_describe(active.outcome.press)}), so "
            f"{_describe(session.outcome.press)} cannot be nested inside it: one model runs one press at a time. "
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
