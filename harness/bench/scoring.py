"""What scoring audio tokens costs, on real-size stand-ins for what layer K-1 computes.

Two ways to get FastV's attention scores are compared on the same queries and keys:
AudioMarathon's (run layer K-1 under eager attention with ``output_attentions``, which materialises
its full (heads, S, S) attention matrix) against kvprune's (the softmax row of the last query only,
``kvprune.engine.attention_probe.last_query_attention``, next to an unchanged sdpa layer). A press's own
work is timed inside real prefills instead (``measure.Probes``); ``select_slots`` serves the CPU
microbenchmarks of each press's selection (tests/perf).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from kvprune.engine.attention_probe import attention_backend, last_query_attention
from kvprune.engine.clips import Clip, find_clips
from kvprune.engine.token_evidence import Evidence, drop_slots
from kvprune.models import resolve_family
from kvprune.press import TokenDropPress
from kvprune.engine.slots import SlotMap

from .measure import Meter


@dataclass
class ScoringInputs:
    """Random tensors with the shapes layer K-1 produces on one prompt (batch 1)."""

    input_ids: torch.Tensor  # (1, S)
    audio_token_id: int
    query: torch.Tensor  # (1, heads, S, head_dim), post-RoPE
    key: torch.Tensor  # (1, kv_heads, S, head_dim), post-RoPE
    value: torch.Tensor  # (1, kv_heads, S, head_dim)
    hidden: torch.Tensor  # (1, S, hidden_size): the layer's output, before the final norm
    norm: nn.Module  # the LLM's final norm (DART compares normed hidden states)
    scaling: float

    @classmethod
    def random(
        cls,
        input_ids,
        audio_token_id: int,
        *,
        heads: int,
        kv_heads: int,
        head_dim: int,
        hidden_size: int,
        norm: nn.Module,
        scaling: float | None = None,
        device=None,
        dtype=torch.float32,
        seed: int = 0,
    ) -> ScoringInputs:
        generator = torch.Generator(device).manual_seed(seed)  # drawn where they live: no host copy
        seq = input_ids.shape[1]

        def randn(*shape):
            return torch.randn(*shape, generator=generator, device=device, dtype=dtype)

        return cls(
            input_ids=input_ids.to(device),
            audio_token_id=audio_token_id,
            query=randn(1, heads, seq, head_dim),
            key=randn(1, kv_heads, seq, head_dim),
            value=randn(1, kv_heads, seq, head_dim),
            hidden=randn(1, seq, hidden_size),
            norm=norm,
            scaling=head_dim**-0.5 if scaling is None else scaling,
        )

    @classmethod
    def for_model(cls, model: nn.Module, layer: int, input_ids: torch.Tensor, seed: int = 0) -> ScoringInputs:
        """Shapes of ``model``'s decoder layer ``layer - 1`` (where presses at ``layer`` read evidence)."""
        family = resolve_family(model)
        config = family.decoder(model).config
        attention = family.layers(model)[layer - 1].self_attn
        parameter = next(attention.parameters())
        return cls.random(
            input_ids,
            family.audio_token_id(model),
            heads=config.num_attention_heads,
            kv_heads=config.num_key_value_heads,
            head_dim=attention.head_dim,
            hidden_size=config.hidden_size,
            norm=family.final_norm(model),
            scaling=attention.scaling,
            device=parameter.device,
            dtype=parameter.dtype,
            seed=seed,
        )

    @property
    def is_audio(self) -> torch.Tensor:
        return self.input_ids == self.audio_token_id

    def clip(self, press: TokenDropPress) -> Clip:
        """The prompt's audio clip with the count ``press`` keeps of it (the bench's prompts have one)."""
        return find_clips(self.input_ids, self.audio_token_id, press.keep)[0][0]

    def evidence(self, needs) -> Evidence:
        """What the engine hands a press, computed the way the engine computes it."""
        is_audio = self.is_audio
        evidence = Evidence.for_prompt(is_audio, torch.ones_like(is_audio))
        if "attention" in needs:
            evidence.attention = last_query_attention(self.query, self.key, None, self.scaling)
        if "keys" in needs:
            evidence.keys = self.key
        if "hidden" in needs:
            evidence.hidden = self.norm(self.hidden)
        return evidence


def select_slots(press: TokenDropPress, inputs: ScoringInputs, clip: Clip) -> SlotMap:
    """A press's whole decision for one prompt, as the engine makes it: scores, ``select``, slots."""
    evidence = inputs.evidence(press.needs)
    slots, _ = drop_slots(press, [[clip]], evidence, evidence.unpruned_positions(), inputs.input_ids.shape[1])
    return slots


def last_row_ms(meter: Meter, inputs: ScoringInputs) -> float:
    """kvprune's FastV scores: the last query's softmax row against all keys."""
    return meter.median_ms(lambda: last_query_attention(inputs.query, inputs.key, None, inputs.scaling))


@dataclass
class EagerCost:
    """What materialising one layer's attention matrix costs beyond running that layer under sdpa."""

    extra_ms: float
    extra_bytes: float  # NaN on CPU


def eager_matrix_cost(meter: Meter, model: nn.Module, layer: int, inputs: ScoringInputs) -> EagerCost:
    """Layer ``layer - 1``'s attention under eager (weights returned, as ``output_attentions`` does)
    minus the same attention under sdpa, in time and peak memory. The causal mask eager needs is
    built beforehand, once, as the model would for all its layers."""
    attention = resolve_family(model).layers(model)[layer - 1].self_attn
    eager = attention_backend(attention, "eager")
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    q, k, v = inputs.query, inputs.key, inputs.value
    seq = q.shape[2]
    mask = torch.full((seq, seq), torch.finfo(q.dtype).min, device=q.device, dtype=q.dtype).triu(1)[None, None]

    def run_eager():
        return eager(attention, q, k, v, mask, scaling=inputs.scaling, dropout=0.0)

    def run_sdpa():
        return sdpa(attention, q, k, v, None, scaling=inputs.scaling, dropout=0.0, is_causal=True)

    return EagerCost(
        extra_ms=meter.median_ms(run_eager) - meter.median_ms(run_sdpa),
        extra_bytes=meter.extra_peak_bytes(run_eager) - meter.extra_peak_bytes(run_sdpa),
    )
