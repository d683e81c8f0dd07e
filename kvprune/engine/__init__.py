"""The pruning engine: hooks on a stock Hugging Face model that shorten what its layers see and keep.

One ``PressSession`` is live per ``with press(model) as outcome:`` block; what it prunes is recorded
on the ``PressOutcome`` it yields. It serves two kinds of press, alone or together: at most one
*token-dropping* press (drops audio tokens from the hidden states before decoder layer K) and any
number of *cache* presses (compress each layer's KV cache once that layer has run its prefill).
Presses are duck-typed: the engine reads ``kind``, ``layer``, ``scope``, ``needs`` and ``prunes`` and
calls ``parts()``, ``keep()`` (how many of a clip's tokens, or a group's entries, stay: never a ratio, which
is the press's own), ``select()`` and ``score()``; of cache presses it also reads ``window``,
``query_rows`` and ``headwise`` and calls ``choose()``, and nothing else. Per forward call of the model:

1. The entry module's pre-hook reads ``input_ids`` and the cache. A call that starts from an empty
   cache is a *prefill*: its prompt is read to the host (one transfer, before the model queues its
   audio encoder), and decoder layer 0's pre-hook finds the audio clips and marks the call for
   pruning if any press has something to remove (host bookkeeping done while the GPU encodes the
   audio, not while it waits). A call that continues a cache pruned earlier reuses its slots.
2. Token dropping: layers ``0..K-1`` run untouched; layer K-1's attention is recorded (keys and the
   last query's attention row) and its output kept, if the press needs them. At layer K the press
   picks the audio tokens to keep and the hidden states, rotary embeddings, position ids and
   attention mask are gathered to the kept slots; every later layer gets the same gathered
   arguments, so layers >= K and their cache hold only the kept tokens.
3. Cache compression: after layer j's prefill, each cache press scores the entries of that layer's
   cache (from the layer's keys and, if it needs them, the queries of the last prompt positions,
   recorded during the layer's attention) and ``kvprune.engine.compression`` keeps the best of its
   candidates, gathering keys and values in place.
4. The cache's slots (which prompt positions each layer's cache holds: ``CacheSlots``) outlive the call, keyed by the
   cache object; on later calls (decoding, another turn) every layer whose cache differs from the
   full prompt gets the attention mask restricted to its slots. Nothing else changes, because kept
   tokens keep their original positions. On a static cache (``cache_implementation="static"``) the
   slots live in the cache instead, each layer at its own static length, and decoding keeps no
   Python state, so that it compiles (``kvprune/engine/static_cache.py``).

Cache layer 0 always stays full length: HF sizes masks and positions from it, which is why pruning
at layer 0 is refused.

One model holds at most one session at a time: nesting a second press on the same model is refused
with a message that says how to compose presses instead (``ComposedPress``); one press may serve
several models at once, each in its own session. Tensors the engine and the presses create follow
the device of the tensor they index, so a model split over devices (``device_map``) prunes exactly
as on one device.

Where the parts live (the modules of this package):

* ``session``: ``PressSession``, the hooks; ``press_plan``: the model's parts found and the press checked
  against them before anything is hooked (``validate_press``); ``stages``: what the hooks share about
  one call, one type per stage (a pruning prefill, its pending and done token drop, a continuation);
* for token-dropping presses: ``clips`` (a prompt's clips and how many tokens each keeps),
  ``token_evidence`` (what the press chooses from, and its choice as slots), ``attention_probe`` (layer
  K-1's attention recorded), ``layer_arguments`` (a layer's arguments gathered to its slots);
* for cache presses: ``cache_scoring`` (``CacheEvidence``: what a press scores), ``cache_budgets`` (how
  many entries each group keeps), ``compression`` (a layer's cache compressed in place);
* shared: ``slots`` (which prompt positions a layer holds), ``masks``, ``static_cache`` (pruned layers
  of a static cache), ``outcome`` (``PressOutcome``: what the block pruned).
"""

from .press_plan import PressPlan, validate_press
from .session import PressSession

__all__ = ["PressPlan", "PressSession", "validate_press"]
