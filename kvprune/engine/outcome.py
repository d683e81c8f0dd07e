"""What a press did: ``with press(model, ratio=0.5) as outcome:`` yields a ``PressOutcome``.

Presses are configuration and never change; everything a ``with`` block learns about pruning lives
here, so one press can serve several models at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .clips import Clip


@dataclass(frozen=True)
class PruneStats:
    """Candidate tokens (or cached entries) of one batch row, and how many of them were kept: audio
    tokens under the default scope, the scope's placeholders under another (``kvprune.engine.clips``)."""

    audio_tokens: int
    kept_tokens: int


class PressOutcome:
    """The outcome of the last prefill of one ``with`` block (a new prefill replaces it; decoding
    and later turns on the same cache do not).

    * ``press``: the press as configured for the block (with its ratio).
    * ``stats[b]``: row b's audio tokens (the placeholders of the token-dropping press's scope) and
      how many the token-dropping press kept (all of them when none drops tokens).
    * ``kept_positions[b]``: the sorted prompt positions (left padding not counted) of those tokens.
    * ``layer_stats[j][b]``: cache compression, the candidate entries layer j's cache held in row b
      (its audio entries under the default ``scope="audio"``) and how many it kept (only the layers
      a cache press compressed; a head-wise press reports its per-head average).
    * ``logit_positions[b]``: which prompt position each row of the prefill's output belongs to. A
      plain forward call (``model(**inputs)``) under a token-dropping press returns hidden states
      and logits for the slots layers >= K kept, not for every prompt position: ``logits[b, i]`` is
      the prediction after ``input_ids[b, logit_positions[b][i]]`` (-1: a filler slot of a row that
      kept fewer tokens than another, to be ignored). The last row is always the last prompt token,
      so ``generate`` and ``logits[:, -1]`` are unaffected.
    """

    def __init__(self, press):
        self.press = press
        self.stats: list[PruneStats] = []
        self.layer_stats: dict[int, list[PruneStats]] = {}
        self._outcome: tuple | None = None
        self._kept_positions: list[torch.Tensor] | None = None
        self._prompt_shape: tuple[int, int] | None = None
        self._output_slots: tuple[torch.Tensor, torch.Tensor] | None = None

    def __repr__(self) -> str:
        return f"PressOutcome(press={self.press!r}, stats={self.stats!r})"

    @property
    def kept_positions(self) -> list[torch.Tensor]:
        if self._kept_positions is None and self._outcome is not None:
            self._kept_positions = [self._positions(*row) for row in zip(*self._outcome)]
        return self._kept_positions or []

    @property
    def logit_positions(self) -> list[torch.Tensor]:
        if self._output_slots is not None:
            index, valid = (t.cpu() for t in self._output_slots)
            return list(index.masked_fill(~valid, -1))
        if self._prompt_shape is None:
            return []
        batch, length = self._prompt_shape
        return [torch.arange(length) for _ in range(batch)]  # nothing dropped: every position, in order

    def kept_by_modality(self) -> list[dict[str, int]]:
        """Per row, the placeholders kept of each modality in the token-dropping press's scope that the
        row holds (``"audio"``, ``"video"``, ``"image"``): ``stats`` split by modality, so that kept
        audio and kept visual tokens are never added up."""
        if self._outcome is None:
            return []
        rows = []
        for row_clips, row_kept in zip(*self._outcome[:2]):
            counts: dict[str, int] = {}
            for clip, kept in zip(row_clips, row_kept):
                counts[clip.modality] = counts.get(clip.modality, 0) + len(kept)
            rows.append(counts)
        return rows

    # -- written by the engine -------------------------------------------------------------------
    def start_prefill(self, prompt_shape: tuple[int, int]) -> None:
        """Forget the previous prefill's outcome; a new one of ``prompt_shape`` (B, S) starts."""
        self.stats, self.layer_stats = [], {}
        self._outcome = self._kept_positions = self._output_slots = None
        self._prompt_shape = prompt_shape

    def record_output_slots(self, index: torch.Tensor, valid: torch.Tensor) -> None:
        """The prompt index (B, L) and validity of each row of the prefill's output, once tokens were dropped."""
        self._output_slots = (index, valid)

    def record_kept(self, clips: list[list[Clip]], kept: list[list[torch.Tensor]], offsets: torch.Tensor) -> None:
        """A prefill's clips and the positions kept per clip. Counts come from shapes; positions are
        read back from the device only when asked for, after the prefill."""
        self.stats = [
            PruneStats(audio_tokens=sum(c.length for c in row_clips), kept_tokens=sum(len(k) for k in row_kept))
            for row_clips, row_kept in zip(clips, kept)
        ]
        self._outcome = (clips, kept, offsets)
        self._kept_positions = None

    def record_layer(self, layer_idx: int, audio: list[int], kept: list[int]) -> None:
        """Per row, the candidate entries of one layer's cache before and after its compression."""
        self.layer_stats[layer_idx] = [PruneStats(a, k) for a, k in zip(audio, kept)]

    def _positions(self, clips, kept, offsets) -> torch.Tensor:
        for clip, indices in zip(clips, kept):
            indices = indices.cpu()
            if len(indices) and (not torch.isin(indices, clip.positions()).all() or len(indices.unique()) != len(indices)):
                selector = next(type(p).__name__ for p in self.press.parts() if p.kind == "token")
                raise RuntimeError(
                    f"{selector}.select returned positions outside its clip (spans {list(clip.spans)}) or duplicates."
                )
        indices = torch.cat(kept).cpu() if kept else torch.zeros(0, dtype=torch.long)
        return offsets.gather(0, indices).sort().values
