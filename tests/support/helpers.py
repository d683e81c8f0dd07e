"""Shared test utilities: generation settings, cache access across transformers versions, and a
press that keeps a fixed set of positions (to recompute a pruned run without a cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch

import torch.nn as nn

from kvprune.models import tiny
from kvprune.press import TokenDropPress
from tests.support.tiny_models import AUDIO, FAMILIES, PAD

# Never let a random model emit placeholder ids: some families re-merge audio when they see one. Nor
# end of sequence: a row generated alone would stop there while its batch goes on padding it, and every
# comparison of decoding would cover fewer steps.
GREEDY = dict(do_sample=False, pad_token_id=PAD, suppress_tokens=[*tiny.SPECIAL_IDS, tiny.TEXT["eos_token_id"]])
# the engine's spelling of GREEDY: never a placeholder, never end of sequence (so every step is compared)
NO_STOP = dict(pad_token_id=GREEDY["pad_token_id"], suppress_tokens=GREEDY["suppress_tokens"], eos_token_id=[])
ATTENTION = ["sdpa", "eager"]
K = 2


@lru_cache(maxsize=None)
def model(family: str, attn: str):
    return FAMILIES[family].build(attn)


# Where a model keeps its decoder, found without asking kvprune (so that the references stay independent
# of the paths the families declare) and the same way for every family.
def language_model(m: nn.Module) -> nn.Module:
    """The model's text decoder: the module holding the model's input embeddings as ``embed_tokens``."""
    embeddings = m.get_input_embeddings()
    (decoder,) = [module for module in m.modules() if getattr(module, "embed_tokens", None) is embeddings]
    return decoder


def decoder_layers(m: nn.Module) -> nn.ModuleList:
    """The language model's decoder layers: its one list of layers with self-attention."""
    (layers,) = [
        child for child in language_model(m).children()
        if isinstance(child, nn.ModuleList) and all(hasattr(layer, "self_attn") for layer in child)
    ]
    return layers


def final_norm(m: nn.Module) -> nn.Module:
    """The norm beside the decoder layers, applied to the last layer's output."""
    return language_model(m).norm


def cache_of(output):
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def cache_lengths(cache, family: str | None = None) -> list[int]:
    """Cache entries each decoder layer attends to: its own, or for a layer that reuses another
    layer's cache (Gemma-3n's last layers; give the ``family``), that layer's."""
    if family is None:
        return [layer.keys.shape[2] for layer in cache.layers]
    sources = kv_sources(family)
    # transformers 5.2x gives sharing layers an empty cache layer, 5.17 none
    return [cache.layers[sources.get(j, j)].keys.shape[2] for j in range(n_layers(family))]


def n_layers(family: str) -> int:
    return FAMILIES[family].config.get_text_config().num_hidden_layers


def kv_sources(family: str) -> dict[int, int]:
    """Decoder layer -> the earlier layer whose cache it reuses (Gemma-3n's last layers; others: none)."""
    fam = FAMILIES[family]
    return fam.family.structure.layer_io.kv_sources(fam.config.get_text_config())


def cache_layers(family: str) -> int:
    """Decoder layers that hold a cache of their own (they come first): the layers cache presses compress."""
    return n_layers(family) - len(kv_sources(family))


def clip_positions(family: str, rows) -> list[list[torch.Tensor]]:
    """Per row, per clip, the prompt positions of its audio tokens, computed from the row layout."""
    out = []
    for row in rows:
        position, clips = 0, []
        for kind, n in row:
            if kind == "text":
                position += n
            else:
                ids = FAMILIES[family].placeholders(n)  # markers around the run, if the family has them
                clips.append(torch.arange(position, position + FAMILIES[family].tokens(n)) + ids.index(AUDIO))
                position += len(ids)
        out.append(clips)
    return out


@dataclass(frozen=True)
class FixedPress(TokenDropPress):
    """Keeps given prompt positions (per row; rows without padding) whatever the evidence says."""

    positions: list[torch.Tensor] = field(default_factory=list)

    def select(self, clip, evidence):
        positions = self.positions[clip.row]
        return positions[torch.isin(positions, clip.positions())]


def single_row(fam, rows, b, seed):
    """Row b of the batch built by ``fam.inputs(rows, seed)``, unpadded, with its own audio only."""
    batch = fam.inputs(rows, seed=seed)
    keep = batch["attention_mask"][b].bool()
    single = dict(input_ids=batch["input_ids"][b : b + 1, keep], attention_mask=batch["attention_mask"][b : b + 1, keep])
    feature_rows = [[fam.feature_rows(n) for kind, n in row if kind == "audio"] for row in rows]
    start = sum(sum(r) for r in feature_rows[:b])
    for name, value in batch.items():
        if name not in single:
            single[name] = value[start : start + sum(feature_rows[b])]  # a clip may take several rows (chunks)
    return single


def audio_clips(input_ids_row: torch.Tensor) -> list[list[int]]:
    """Runs of audio placeholders as lists of indices, found by a plain scan."""
    clips, current = [], []
    for i, token in enumerate(input_ids_row.tolist()):
        if token == AUDIO:
            current.append(i)
        elif current:
            clips.append(current)
            current = []
    if current:
        clips.append(current)
    return clips


def compiled_through(passes, module: nn.Module, *inputs) -> tuple[torch.Tensor, list[torch.fx.Node]]:
    """``module`` compiled (whole graph) with ``passes`` run over its FX graph before it executes as written: its
    output on ``inputs``, and the graph's nodes after the passes."""
    nodes = []

    def backend(graph_module, example_inputs):
        passes(graph_module.graph)
        graph_module.recompile()
        nodes.extend(graph_module.graph.nodes)
        return graph_module.forward

    return torch.compile(module, backend=backend, fullgraph=True)(*inputs), nodes
