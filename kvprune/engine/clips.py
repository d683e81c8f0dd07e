"""Where the media is in a prompt: placeholder tokens of each modality, grouped into clips.

A *clip* is the placeholders one source put into the prompt: one audio clip, one video, one image.
Usually that is one contiguous run of its placeholder token. An Omni model's video with its sound
track (``use_audio_in_video``) interleaves the two in time: ``<audio_bos> V V A A A V V A A A
<audio_eos>``, each ~2 s chunk's video tokens, then its audio tokens. So the runs of one modality
that only other modalities' placeholders separate belong to one clip: the audio runs between the
video chunks are the one sound track they came from, and the video runs one video. Text or any
marker between two runs ends a clip. For audio-only prompts this is exactly one clip per contiguous
run of audio placeholders.

Presses act on the clips of their *scope*: ``"audio"`` (the default), ``"video"`` (the visual
placeholders: video frames and still images) or ``"audio+video"``; each clip keeps its own count,
computed from its whole length (a sound track's count is per track, not per chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

#: placeholder kinds, as codes in a (B, S) kinds tensor (0: text, special tokens, markers)
MODALITIES = ("audio", "video", "image")
CODES = {name: code for code, name in enumerate(MODALITIES, start=1)}
#: what a press may prune, by scope
SCOPE_MODALITIES = {"audio": ("audio",), "video": ("video", "image"), "audio+video": ("audio", "video", "image")}
TOKEN_SCOPES = tuple(SCOPE_MODALITIES)


@dataclass(frozen=True)
class Clip:
    """The placeholders of one source in one batch row: one or more runs ``spans`` of (start, end)
    indices into the (possibly left-padded) input tensor, in order.

    ``index`` numbers the clips of a row from 0 in prompt order (every modality together), so a clip
    is identified the same way whether its row runs alone or in a batch. ``n_keep`` is how many of
    its ``length`` tokens a press keeps (all of them for a clip outside the press's scope).
    """

    row: int
    index: int
    spans: tuple[tuple[int, int], ...]
    n_keep: int
    modality: str = "audio"

    @property
    def start(self) -> int:
        return self.spans[0][0]

    @property
    def end(self) -> int:
        return self.spans[-1][1]

    @property
    def length(self) -> int:
        return sum(end - start for start, end in self.spans)

    def positions(self, device=None) -> torch.Tensor:
        """The clip's prompt indices, in order (a press selects among these)."""
        return torch.cat([torch.arange(start, end, device=device) for start, end in self.spans])

    def take(self, indices) -> torch.Tensor:
        """The clip's prompt indices at ``indices`` (into ``positions()``: host ints or a host tensor), on the host.
        Taken by NumPy: torch's index kernel on a GPU machine's host took 5-12 ms now and then instead of 0.05,
        right after a compilation (Inductor's worker processes starting on the cores; an H200's 16, 2026-11-29),
        in the middle of the prefill that asked; none of torch's other small host ops did."""
        return torch.from_numpy(self.positions().numpy()[np.asarray(indices)])


def scope_modalities(scope: str) -> tuple[str, ...]:
    if scope not in SCOPE_MODALITIES:
        raise ValueError(f"scope={scope!r} is invalid; choose one of {TOKEN_SCOPES}.")
    return SCOPE_MODALITIES[scope]


def placeholder_kinds(input_ids: torch.Tensor, token_ids: dict[str, int]) -> torch.Tensor:
    """(B, S) int8 on the ids' device: each position's modality code (``CODES``), 0 where it is no
    placeholder. ``token_ids`` maps a modality to its placeholder id (those a model has)."""
    kinds = torch.zeros(input_ids.shape, dtype=torch.int8, device=input_ids.device)
    for modality, token_id in token_ids.items():
        kinds.masked_fill_(input_ids == token_id, CODES[modality])
    return kinds


def scope_mask(kinds: torch.Tensor, modalities: tuple[str, ...]) -> torch.Tensor:
    """(B, S) bool: the positions of a kinds tensor whose placeholders are of ``modalities``."""
    mask = torch.zeros(kinds.shape, dtype=torch.bool, device=kinds.device)
    for modality in modalities:
        mask |= kinds == CODES[modality]
    return mask


def clips_of(kinds: torch.Tensor, keep: Callable[[int], int] | None = None,
             modalities: tuple[str, ...] = ("audio",)) -> list[list[Clip]]:
    """Every clip of a (B, S) host kinds tensor, per row in prompt order. Clips of ``modalities`` keep
    ``keep(length)`` tokens (a token-dropping press's ``keep``; None: all); the others keep all of theirs."""
    kinds = kinds.to(torch.int8)
    padded = torch.nn.functional.pad(kinds, (1, 1))
    changes = (padded[:, 1:] != padded[:, :-1]).nonzero().tolist()  # (row, index) where a run starts or ends
    boundaries: list[list[int]] = [[] for _ in range(kinds.shape[0])]
    for row, index in changes:
        boundaries[row].append(index)
    rows = []
    for row, edges in enumerate(boundaries):
        codes = kinds[row].tolist()
        runs = [(codes[start], start, end) for start, end in zip(edges, edges[1:]) if codes[start]]
        rows.append(_group(row, runs, keep, modalities))
    return rows


def _group(row: int, runs, keep, modalities) -> list[Clip]:
    """The runs of one row grouped into clips: a run joins the open clip of its modality unless
    something that is no placeholder came between them."""
    open_spans: dict[int, list[tuple[int, int]]] = {}
    groups: list[list[tuple[int, int]]] = []
    kinds_of: list[int] = []
    previous_end = None
    for code, start, end in runs:
        if previous_end is not None and start != previous_end:  # text or a marker in between
            open_spans = {}
        if code not in open_spans:
            open_spans[code] = []
            groups.append(open_spans[code])
            kinds_of.append(code)
        open_spans[code].append((start, end))
        previous_end = end
    clips = []
    for index, (code, spans) in enumerate(zip(kinds_of, groups)):
        modality = MODALITIES[code - 1]
        length = sum(end - start for start, end in spans)
        n_keep = keep(length) if keep is not None and modality in modalities else length
        clips.append(Clip(row=row, index=index, spans=tuple(spans), n_keep=n_keep, modality=modality))
    return clips


def find_clips(input_ids: torch.Tensor, audio_token_id: int, keep: Callable[[int], int] | None = None) -> list[list[Clip]]:
    """The audio clips of each row with their kept counts, ``keep(length)`` (a prompt without other media)."""
    return clips_of(placeholder_kinds(input_ids, {"audio": audio_token_id}).cpu(), keep)
