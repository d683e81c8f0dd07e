"""Audio files to the mono 16 kHz float32 waveforms every supported processor expects (one per file, or
several when a task's channel policy splits a file: ``channels``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from .channels import MEAN, ChannelError, Channels

SAMPLING_RATE = 16_000


class AudioLoadError(ValueError):
    """An audio file is missing or unreadable, or does not fit the task's channel policy; the message
    names the file and the fix."""


def load_audio(path: str | Path, sampling_rate: int = SAMPLING_RATE) -> np.ndarray:
    """Read ``path``, downmix to mono and resample to ``sampling_rate``."""
    return load_clips(path, MEAN, sampling_rate)[0]


def load_clips(path: str | Path, channels: Channels = MEAN, sampling_rate: int = SAMPLING_RATE) -> list[np.ndarray]:
    """Read ``path`` and turn its channels into mono clips by ``channels``, each resampled to
    ``sampling_rate`` (and scaled, if the policy normalizes)."""
    path = Path(path)
    if not path.is_file():
        raise AudioLoadError(f"audio file not found: {path}")
    try:
        data, rate = sf.read(path, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as error:
        raise AudioLoadError(f"cannot read audio file {path}: {error}") from None
    if data.shape[0] == 0:
        raise AudioLoadError(f"audio file is empty: {path}")
    check_samples(data, path)
    try:
        clips = channels.apply(data, path)
    except ChannelError as error:
        raise AudioLoadError(str(error)) from None
    return [channels.scaled(resample(clip, rate, sampling_rate)) for clip in clips]


def check_samples(data: np.ndarray, path) -> None:
    """Refuse audio no model should be scored on: NaN or infinite samples (a corrupt file or a
    failed conversion, which would reach the model as garbage and come back as an empty answer), or
    digital silence throughout (every sample exactly 0: a conversion that wrote nothing)."""
    bad = ~np.isfinite(data)
    if bad.any():
        raise AudioLoadError(
            f"audio file {path} holds {int(bad.sum())} NaN or infinite samples of {data.size}: it is corrupt or "
            "was converted wrongly; fix or replace the file."
        )
    if not data.any():
        raise AudioLoadError(
            f"audio file {path} is digital silence throughout (every sample is 0), which usually means a failed "
            "conversion; fix or replace the file."
        )


def resample(wave: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Band-limited resampling by zero-padding or truncating the spectrum (as scipy.signal.resample)."""
    if rate == target:
        return wave.astype(np.float32, copy=False)
    n_out = int(round(len(wave) * target / rate))
    spectrum = np.fft.rfft(wave)
    n_bins = n_out // 2 + 1
    if n_bins <= len(spectrum):
        spectrum = spectrum[:n_bins]
    else:
        spectrum = np.pad(spectrum, (0, n_bins - len(spectrum)))
    return (np.fft.irfft(spectrum, n=n_out) * (n_out / len(wave))).astype(np.float32)


def duration_seconds(waves: list[np.ndarray], sampling_rate: int = SAMPLING_RATE) -> float:
    return sum(len(w) for w in waves) / sampling_rate
