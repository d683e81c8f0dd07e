"""Channel policies: how the channels of a task's audio files become the mono clips a model hears.

- ``mean`` (default): the mean of all channels, one clip.
- ``select``: the mean of the listed channels (0-based), one clip.
- ``split``: one clip per channel, in channel order (files of ``count`` channels: the count is stated
  in the task and checked against each file), followed in the prompt by a legend saying which is which.
- ``foa_omni``: first-order ambisonics (4 channels), the omnidirectional W channel alone. Not the
  mean of W, X, Y, Z: that is a beam pointing to the front-left-up diagonal.
- ``foa_stereo``: first-order ambisonics as two clips, virtual cardioids facing left and right,
  ``(W + Y) / 2`` and ``(W - Y) / 2``, with a legend.

Ambisonic channel order and normalisation are stated in the task: ``acn`` (AmbiX: W, Y, Z, X,
SN3D) or ``fuma`` (W, X, Y, Z, with W at -3 dB, so it is scaled by sqrt(2) to the SN3D W first).

Any policy may also scale each clip to a peak of 1 once it is resampled (``normalize: peak``; a
silent clip stays as it is), as AudioMarathon's Phi-4-MM scripts do before their processor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

POLICIES = ("mean", "select", "split", "foa_omni", "foa_stereo")
NORMALIZATIONS = ("peak",)
FOA_ORDERS = {  # order -> (index of W, index of Y, gain that makes W the SN3D W)
    "acn": (0, 1, 1.0),
    "fuma": (0, 2, math.sqrt(2.0)),
}
TWO_CLIP_LEGEND = "Audio 1 is the left channel and Audio 2 is the right channel.\n"
_TAKEN_BY = {  # field -> the policies that take it
    "select": ("select",), "count": ("split",), "order": ("foa_omni", "foa_stereo"), "legend": ("split", "foa_stereo"),
}


class ChannelError(ValueError):
    """A file does not fit the task's channel policy; the message names the file and the fix."""


@dataclass(frozen=True)
class Channels:
    """How a file's channels become clips (module docstring)."""

    policy: str = "mean"
    select: tuple[int, ...] = ()  # select: the channels averaged
    count: int | None = None  # split: the channels every file has
    order: str | None = None  # foa_*: "acn" or "fuma"
    legend: str | None = None  # split, foa_stereo: the text after the clips (default: TWO_CLIP_LEGEND for 2 clips)
    normalize: str | None = None  # "peak": each clip scaled to a peak of 1 after resampling

    def __post_init__(self) -> None:
        object.__setattr__(self, "select", tuple(self.select))
        if self.policy not in POLICIES:
            raise ValueError(f"unknown channel policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        if self.normalize is not None and self.normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize={self.normalize!r}: choose {' or '.join(NORMALIZATIONS)}, or leave it out")
        unused = [k for k, policies in _TAKEN_BY.items() if self.policy not in policies and getattr(self, k) not in ((), None)]
        if unused:
            raise ValueError(f"channel policy {self.policy} takes no {', '.join(unused)}")
        if self.policy == "select" and (not self.select or not all(isinstance(c, int) and c >= 0 for c in self.select)):
            raise ValueError("channel policy select needs select: [channel, ...], 0-based channel numbers")
        if self.policy == "split" and (not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 2):
            raise ValueError("channel policy split needs count: the number of channels every file has (at least 2)")
        if self.policy in _TAKEN_BY["order"] and self.order not in FOA_ORDERS:
            raise ValueError(f"channel policy {self.policy} needs order: {' or '.join(FOA_ORDERS)} (the files' ambisonic channel order)")
        if self.legend is None and self.policy in _TAKEN_BY["legend"]:
            object.__setattr__(self, "legend", TWO_CLIP_LEGEND if self.clips_per_file == 2 else "")

    @classmethod
    def from_config(cls, value) -> Channels:
        """From a task's ``channels:`` value: a policy name, or a mapping ``{policy: ..., <its fields>}``."""
        if isinstance(value, str):
            return cls(value)
        if not isinstance(value, dict) or "policy" not in value:
            raise ValueError("expected a policy name or a mapping {policy: ..., ...}")
        unknown = sorted(set(value) - {"policy", "normalize", *_TAKEN_BY})
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; a channel policy takes policy, normalize, {', '.join(_TAKEN_BY)}")
        return cls(**value)

    @property
    def clips_per_file(self) -> int:
        return {"split": self.count, "foa_stereo": 2}.get(self.policy) or 1

    @property
    def channels_needed(self) -> int | None:
        """The exact channel count a file must have (None: any)."""
        return {"split": self.count, "foa_omni": 4, "foa_stereo": 4}.get(self.policy)

    def describe(self) -> str:
        details = {"select": f" {list(self.select)}", "split": f" of {self.count} channels"}.get(self.policy, "")
        return f"{self.policy}{details}" + (f" ({self.order} order)" if self.order else "")

    def apply(self, data: np.ndarray, path: Path | str) -> list[np.ndarray]:
        """The clips of one file's samples ``data`` (frames, channels)."""
        channels = data.shape[1]
        needed = self.channels_needed
        if needed is not None and channels != needed:
            raise ChannelError(
                f"{path} has {channels} channel(s), but the task's channel policy {self.describe()} needs {needed}: "
                "give the task a channels: policy that fits the files (mean, select, split with their count), "
                "or point it at the right files."
            )
        if self.policy == "select" and max(self.select) >= channels:
            raise ChannelError(
                f"{path} has {channels} channel(s), but the task's channel policy selects channel {max(self.select)} "
                f"(0-based): select channels below {channels}."
            )
        if self.policy == "mean":
            return [data.mean(axis=1)]
        if self.policy == "select":
            return [data[:, list(self.select)].mean(axis=1)]
        if self.policy == "split":
            return [data[:, c] for c in range(channels)]
        w_index, y_index, w_gain = FOA_ORDERS[self.order]
        w, y = data[:, w_index] * w_gain, data[:, y_index]
        return [w] if self.policy == "foa_omni" else [0.5 * (w + y), 0.5 * (w - y)]

    def scaled(self, clip: np.ndarray) -> np.ndarray:
        """A resampled clip as the model hears it: peak-normalized when the policy says so."""
        peak = float(np.abs(clip).max()) if self.normalize == "peak" and clip.size else 0.0
        return clip / np.float32(peak) if peak > 0 else clip


MEAN = Channels()
