"""DART: keep the audio tokens least duplicated by a few pivot tokens (no attention weights needed).

Pivots are the ``pivot_audio`` audio tokens and the ``pivot_text`` text tokens after the clip with
the largest L1 norm of layer K-1's keys (post-RoPE, heads flattened). Duplication is the cosine
similarity of layer K-1's output hidden states after the final norm. Pivots, in prompt order, each
claim their share of the remaining audio tokens least similar to them; text pivots are not kept.

Budgets:

* ``"equal"`` (default): exactly ``max(1, round(n * (1 - ratio)))`` tokens per clip, pivots included,
  the same count as every other press, so methods are compared at the same budget. The ``k - p_a``
  claims are split as evenly as possible, earlier pivots taking the remainder.
* ``"reference"``: AudioMarathon's count, ``p_a + (p_a + p_t) * int(n * (1 - ratio) / (p_a + p_t))``
  (capped at ``n``), which differs from the others' count by up to ``p_a`` tokens either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from kvprune.engine.slots import to_device
from kvprune.press import TokenDropPress, register_press

BUDGETS = ("equal", "reference")


@register_press("dart")
@dataclass(frozen=True)
class DARTPress(TokenDropPress):
    pivot_audio: int = 4
    pivot_text: int = 4
    budget: str = "equal"

    needs: ClassVar[frozenset[str]] = frozenset({"keys", "hidden"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.budget not in BUDGETS:
            raise ValueError(f"budget={self.budget!r} is invalid; choose one of {BUDGETS}.")
        if self.pivot_audio < 1 or self.pivot_text < 0:
            raise ValueError("pivot_audio must be >= 1 and pivot_text >= 0.")

    def select(self, clip, evidence) -> torch.Tensor:
        row, n = clip.row, clip.length
        hidden = evidence.hidden[row]
        # everything below lives where the hidden states are: on a model split over devices, layer
        # K-1's keys and the final norm's output (the hidden states) may sit on different devices
        device = hidden.device
        key_norm = evidence.keys[row].transpose(0, 1).flatten(1).float().abs().sum(-1).to(device)  # (S,)
        audio = clip.positions(device)
        # the text after the clip is found on the host: its size decides the shares, and reading it
        # back from the device would stall the prefill
        after = torch.arange(len(evidence.host_valid[row])) >= clip.end
        text_after = (after & evidence.host_valid[row] & ~evidence.host_placeholders[row]).nonzero().flatten()

        n_audio_pivots = min(self.pivot_audio, clip.n_keep if self.budget == "equal" else n)
        audio_pivot_offsets = key_norm[audio].topk(n_audio_pivots).indices  # offsets within the clip
        audio_pivots = audio[audio_pivot_offsets]
        n_text_pivots = min(self.pivot_text, len(text_after))
        text_after = to_device(text_after, device)
        text_pivots = text_after[key_norm[text_after].topk(n_text_pivots).indices]
        pivots = torch.cat([audio_pivots, text_pivots]).sort().values  # claims go in prompt order
        shares = self._shares(clip.n_keep, n, n_audio_pivots, n_audio_pivots + n_text_pivots)

        clip_features = F.normalize(hidden[audio].float(), dim=-1)
        pivot_features = F.normalize(hidden[pivots].float(), dim=-1)
        similarities = clip_features @ pivot_features.T  # (n, pivots): one matrix product for all pivots
        # index_fill_ takes False as a number; ``pool[i] = False`` copies it in from the host, waiting for the device
        pool = torch.ones(n, dtype=torch.bool, device=device).index_fill_(0, audio_pivot_offsets, False)
        kept = [audio_pivots]
        for column, share in enumerate(shares):
            if share == 0:
                continue
            similarity = similarities[:, column].masked_fill(~pool, float("inf"))
            chosen = similarity.topk(share, largest=False).indices
            pool.index_fill_(0, chosen, False)
            kept.append(audio[chosen])
        return torch.cat(kept)

    def _shares(self, n_keep: int, n: int, n_audio_pivots: int, n_pivots: int) -> list[int]:
        """How many audio tokens each pivot claims, in pivot order, never more than remain."""
        if self.budget == "equal":
            claims = n_keep - n_audio_pivots
            shares = [claims // n_pivots + (i < claims % n_pivots) for i in range(n_pivots)]
        else:
            shares = [int(n * (1.0 - self.ratio) / n_pivots)] * n_pivots
        remaining = n - n_audio_pivots
        capped = []
        for share in shares:
            capped.append(min(share, remaining))
            remaining -= capped[-1]
        return capped
