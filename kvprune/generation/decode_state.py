"""The fixed buffers one decoding loop reads and writes, so that a step can be captured once as a CUDA
graph and replayed for every later token and every later call of the same shapes.

Each decoder layer gets a static cache layer of its own length, a *bucket* at least as long as the
entries it kept plus the tokens to generate: after pruning, layers >= K hold far fewer entries than
layers < K, and a pruned decode step should read only those. A row's prompt entries sit at the start
of each layer (filler slots of rows that kept fewer entries stay invalid), and each row writes its
next token at its own column; which slots a layer's queries may see is a boolean mask per *group* of
layers laid out alike (layers < K, layers >= K, each compressed layer), updated on the device as
tokens are written. Lengths are rounded up to buckets (``bucket_length``) so that a sweep over
thousands of prompt lengths reuses a bounded number of shapes, and so of captured graphs.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, StaticLayer

from ..press import TOKEN_LAYER
from .prefill import Prefill


def bucket_length(n: int, per_octave: int = 8, minimum: int = 64) -> int:
    """``n`` rounded up to one of ``per_octave`` lengths per power of two (at most 1/per_octave longer)."""
    if n <= minimum:
        return minimum
    step = max(1, 1 << (n.bit_length() - 1 - (per_octave.bit_length() - 1)))
    return -(-n // step) * step


class DecodeLayer(StaticLayer):
    """A static cache layer over given buffers where each row writes its new token at its own column
    (``columns``: its group's own tensor, shared by the layers of the group and advanced by the decode step;
    never a view of a larger tensor, see ``DecodeState``).

    ``get_seq_length`` answers with a host number, never a device tensor: model code branches on it
    (prefill or not), and reading a device value would stall a captured graph."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, columns: torch.Tensor):
        super().__init__(max_cache_len=keys.shape[-2])
        self.keys, self.values, self.columns = keys, values, columns
        self.device = keys.device
        self.batch_size, self.num_heads = keys.shape[:2]
        self.k_head_dim, self.v_head_dim = keys.shape[-1], values.shape[-1]
        self.is_initialized = True
        self.new_entries = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """The buffers, with the new entries held for the attention to write (``take_new_entries``): its kernel
        stores them where it runs, one launch a layer fewer than a write of their own."""
        if key_states.shape[-2] != 1:
            raise RuntimeError("kvprune's decode cache takes one new token per row and call.")
        self.new_entries = (key_states, value_states)
        return self.keys, self.values

    def take_new_entries(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The new key and value ``update`` held (None once taken): the taker writes them at ``columns``."""
        entries, self.new_entries = self.new_entries, None
        return entries

    def get_seq_length(self) -> int:
        return 1  # decoding continues a prompt: never an empty cache


class DecodeCache(Cache):
    """The layers of one decoding loop (a ``transformers`` cache, so that the model writes into it)."""

    def __init__(self, layers: list[DecodeLayer]):
        super().__init__(layers=layers)


@dataclass(frozen=True)
class StateShape:
    """What a decode state's buffers are sized by: reused across calls that agree on it."""

    batch: int
    capacities: tuple[int, ...]  # per group: its layers' static length
    mask_heads: tuple[int, ...]  # per group: 1, or attention heads for head-wise compression
    layer_group: tuple[int, ...]  # per decoder layer, its group
    new_tokens: int  # room of the output buffer
    split_at: int | None = None  # a prefill laid out as one group is split at this layer (``layer_groups``)

    @property
    def grouping(self) -> tuple:
        """How the layers are grouped (each layer's group, each group's mask heads), whatever the lengths
        and rows: a compiled step's own key."""
        return self.mask_heads, self.layer_group

    def fits(self, other: StateShape) -> bool:
        """Whether a state of this shape can hold what ``other`` asks for (same grouping, enough room)."""
        return (self.batch, self.grouping) == (other.batch, other.grouping) and all(
            mine >= theirs for mine, theirs in zip((*self.capacities, self.new_tokens), (*other.capacities, other.new_tokens))
        )


def layer_groups(prefill: Prefill, split_at: int | None = None) -> tuple[tuple[int, ...], list[int], list[int]]:
    """Per layer its group (layers whose slots were laid out by the same decision share a mask), and
    per group its width (entries per row) and mask heads.

    A prefill whose layers all hold the same entries (unpruned, or nothing pruned) is one group, or with
    ``split_at`` (K) two alike, layers < K and the rest: laid out as a token press at K lays out its own, it
    decodes on that press's compiled step, where a grouping of its own would be a compilation of its own
    (about a minute on a GPU for a model of 28-36 layers)."""
    groups: dict[int, int] = {}
    layer_group, widths, heads = [], [], []
    for entries in prefill.layers:
        key = id(entries.slots) if entries.slots is not None else 0
        if key not in groups:
            groups[key] = len(widths)
            widths.append(entries.valid.shape[-1])
            heads.append(entries.valid.shape[1])
        layer_group.append(groups[key])
    if len(widths) == 1 and split_at is not None and 0 < split_at < len(layer_group):
        return (0,) * split_at + (1,) * (len(layer_group) - split_at), widths * 2, heads * 2
    return tuple(layer_group), widths, heads


def unpruned_split(presses) -> int:
    """``Generator.split_unpruned_at`` for a generator that will run ``presses``: the K at which most of their
    token parts drop tokens (their caches' split, which the unpruned prompts then share), else the default K."""
    layers = Counter(part.layer for press in presses if press is not None for part in press.parts() if part.kind == "token")
    return layers.most_common(1)[0][0] if layers else TOKEN_LAYER


def state_shape(prefill: Prefill, batch: int, new_tokens: int, per_octave: int, stretch: float = 1.0,
                split_at: int | None = None) -> StateShape:
    """The bucketed shape that decodes ``batch`` rows laid out like ``prefill`` for ``new_tokens`` tokens;
    ``stretch``: room for prompts that much longer than this prefill's (kept entries in proportion);
    ``split_at``: see ``layer_groups``."""
    layer_group, widths, heads = layer_groups(prefill, split_at)
    capacities = tuple(bucket_length(math.ceil(w * stretch) + new_tokens, per_octave) for w in widths)
    return StateShape(batch, capacities, tuple(heads), layer_group, bucket_length(new_tokens, per_octave, 8), split_at)


class DecodeState:
    """The buffers of one decoding loop at one ``StateShape`` (see the module docstring).

    Filling it (``reset``, then ``load`` for each prefilled batch of rows) copies prompt entries in
    place, so that a graph captured on the state replays on the new prompts."""

    def __init__(self, shape: StateShape, template: Prefill):
        self.shape = shape
        device = template.logits.device
        batch = shape.batch
        # one tensor per group, not rows of one (groups, B) tensor: a compiled step that meets a second grouping
        # would see each layer's view of that tensor as an input whose base has a size of its own, a symbol
        # that torch 2.11 cannot build the GPU backend's 32-bit-indexing guard for (the step then fell back
        # to running uncompiled for every token press in batches)
        self.columns = [torch.zeros(batch, dtype=torch.long, device=device) for _ in shape.capacities]
        layers = []
        for j, entries in enumerate(template.layers):
            group = shape.layer_group[j]
            kv = (batch, entries.keys.shape[1], shape.capacities[group])
            keys = torch.zeros((*kv, entries.keys.shape[-1]), dtype=entries.keys.dtype, device=entries.keys.device)
            values = torch.zeros((*kv, entries.values.shape[-1]), dtype=entries.values.dtype, device=entries.values.device)
            layers.append(DecodeLayer(keys, values, self.columns[group]))
        self.cache = DecodeCache(layers)
        self.masks = [
            torch.zeros(batch, heads, 1, capacity, dtype=torch.bool, device=device)
            for capacity, heads in zip(shape.capacities, shape.mask_heads)
        ]
        # each layer's mask, chosen here on the host: the step reads no grouping numbers (which a compiled step
        # that met two groupings would take as dynamic integers)
        self.layer_masks = tuple(self.masks[g] for g in shape.layer_group)
        self.layer_columns = tuple(self.columns[g] for g in shape.layer_group)  # each row's last visible slot
        self.tokens = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros((*template.next_positions.shape[:-2], batch, 1), dtype=torch.long, device=device)
        self.step = torch.zeros(1, dtype=torch.long, device=device)
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)
        self.out = torch.zeros(batch, shape.new_tokens, dtype=torch.long, device=device)
        self.graph = None  # the captured decode step (False: capture failed), once captured on this state
        self._lengths_marked = False

    @property
    def nbytes(self) -> int:
        """Device memory the state's buffers hold (the cache's keys and values, masks, outputs)."""
        tensors = [t for layer in self.cache.layers for t in (layer.keys, layer.values)] + self.masks + [self.out]
        return sum(t.numel() * t.element_size() for t in tensors)

    def mark_lengths_dynamic(self) -> None:
        """Mark the dimensions that are bucket lengths (caches, masks, the output's room) dynamic, once per
        state: a compiled step then takes them as dynamic from its first compilation, and new lengths reuse it.
        The grouping's own sizes (a mask's heads: 1, or a head-wise press's heads) stay static: a grouping is a
        compilation of its own, never a dynamic size that a second grouping would make of it."""
        if self._lengths_marked:
            return
        import torch._dynamo

        caches = [(t, 2) for layer in self.cache.layers for t in (layer.keys, layer.values)]
        for tensor, dim in [*caches, *((mask, 3) for mask in self.masks), (self.out, 1)]:
            torch._dynamo.maybe_mark_dynamic(tensor, dim)
        for mask in self.masks:
            torch._dynamo.mark_static(mask, 1)
        self._lengths_marked = True

    def reset(self) -> None:
        """Forget every row (masks, columns, outputs) before loading new prompts."""
        for tensor in (*self.masks, *self.columns):
            tensor.zero_()
        self.step.fill_(1)
        self.done.zero_()
        self.out.zero_()

    def load(self, prefill: Prefill, offset: int, first_tokens: torch.Tensor, done: torch.Tensor) -> None:
        """Copy a prefill's rows in at rows ``offset..``; their first new token (already chosen from the
        prefill's logits) is column 0 of ``out``, and each row's next write is after its entries."""
        rows = slice(offset, offset + prefill.batch)
        layer_group, widths, _ = layer_groups(prefill, self.shape.split_at)
        if layer_group != self.shape.layer_group:
            raise ValueError("these prompts were pruned into other groups of layers than the decode state's; decode them apart.")
        destinations, sources = [], []
        for layer, entries in zip(self.cache.layers, prefill.layers):
            held = entries.keys.shape[-2]
            destinations += [layer.keys[rows, :, :held], layer.values[rows, :, :held]]
            sources += [entries.keys, entries.values]
        # one call for every layer's copies: the GPU has run dry by the end of a host-bound prefill, so that each
        # of them, made from Python, would keep it waiting
        torch._foreach_copy_(destinations, sources)
        for g, width in enumerate(widths):  # a group's layers share their slots, so their validity: one write each
            self.masks[g][rows, :, 0, :width] = prefill.layers[layer_group.index(g)].valid
            self.columns[g][rows] = width  # a fill: copying a host list in would wait for the device
        self.tokens[rows, 0] = first_tokens
        self.positions[..., rows, :] = prefill.next_positions
        self.done[rows] = done
        self.out[rows, 0] = first_tokens

    def idle(self, first: int) -> None:
        """Rows ``first..`` hold no prompt (a call with fewer rows than its state): ended from the start, each
        seeing one slot of what the buffers hold (a row that sees none would fill its softmax with NaN)."""
        if first >= self.shape.batch:
            return
        self.done[first:] = True
        for mask, columns in zip(self.masks, self.columns):
            mask[first:, :, 0, 0] = True
            columns[first:] = 1  # its writes go after that slot

    def copy_rows_from(self, other: DecodeState, rows: int) -> None:
        """The first ``rows`` rows of a smaller state (same grouping), for a batch that outgrew it."""
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            width = theirs.keys.shape[-2]
            mine.keys[:rows, :, :width].copy_(theirs.keys[:rows])
            mine.values[:rows, :, :width].copy_(theirs.values[:rows])
        for mine, theirs in zip(self.masks, other.masks):
            mine[:rows, :, :, : theirs.shape[-1]].copy_(theirs[:rows])
        for mine, theirs in zip(self.columns, other.columns):
            mine[:rows].copy_(theirs[:rows])
        for name in ("tokens", "done", "out"):
            getattr(self, name)[:rows].copy_(getattr(other, name)[:rows])
        self.positions[..., :rows, :].copy_(other.positions[..., :rows, :])

    def _mutable(self) -> list[torch.Tensor]:
        return [*self.masks, *self.columns, self.tokens, self.positions, self.step, self.done, self.out]

    def snapshot(self) -> list[torch.Tensor]:
        """Copies of what one step changes (besides the cache's new column), to undo a warm-up step."""
        return [t.clone() for t in self._mutable()]

    def restore(self, snapshot: list[torch.Tensor]) -> None:
        for tensor, saved in zip(self._mutable(), snapshot):
            tensor.copy_(saved)
