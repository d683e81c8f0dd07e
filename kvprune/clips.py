"""Where the audio is in a prompt: contiguous runs of the audio placeholder token, one clip each."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .ratios import keep_count


@dataclass(frozen=True)
class AudioClip:
    """One contiguous run of audio placeholders in one batch row.

    ``start``/``end`` index the (possibly left-padded) input tensor; ``index`` numbers the clips
    of a row from 0, so a clip is identified the same way whether its row runs alone or in a batch.
    """

    row: int
    index: int
    start: int
    end: int
    n_keep: int

    @property
    def length(self) -> int:
        return self.end - self.start

    def positions(self, device=None) -> torch.Tensor:
        return torch.arange(self.start, self.end, device=device)


def find_clips(input_ids: torch.Tensor, audio_token_id: int, ratio: float, keep_rule: str = "round") -> list[list[AudioClip]]:
    """Split each row's audio placeholders into clips and give each its kept count."""
    return clips_of((input_ids == audio_token_id).cpu(), ratio, keep_rule)


def clips_of(is_audio: torch.Tensor, ratio: float, keep_rule: str = "round") -> list[list[AudioClip]]:
    """The clips of a (B, S) host bool mask of audio placeholder positions; each keeps
    ``keep_count(length, ratio, keep_rule)`` tokens."""
    padded = torch.nn.functional.pad(is_audio.to(torch.int8), (1, 1))
    edges = padded[:, 1:] - padded[:, :-1]
    clips: list[list[AudioClip]] = []
    for row in range(is_audio.shape[0]):
        starts = (edges[row] == 1).nonzero().flatten().tolist()
        ends = (edges[row] == -1).nonzero().flatten().tolist()
        clips.append(
            [
                AudioClip(row=row, index=i, start=s, end=e, n_keep=keep_count(e - s, ratio, keep_rule))
                for i, (s, e) in enumerate(zip(starts, ends))
            ]
        )
    return clips
