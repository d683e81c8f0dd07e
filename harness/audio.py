"""Audio files to the mono 16 kHz float32 waveforms every supported processor expects (one per file, or
several when a task's channel policy splits a file: ``channels``).

Loading follows ``librosa.load(path, sr=16000)``, the loader of the reference pipelines
(AudioMarathon's scripts): soundfile reads float32 samples, channels are averaged (the default
``mean`` policy), and each clip is resampled with soxr at its "HQ" quality (``soxr_hq``, librosa's
default ``res_type``), the result cut or zero-padded to ``ceil(n * (16000 / rate))`` samples as
``librosa.resample`` (``fix=True``) leaves it. soxr is the maintained resampler librosa calls, so the
waveforms equal librosa's to the bit without librosa and its dependencies (numba, scipy, scikit-learn).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from .channels import MEAN, ChannelError, Channels

SAMPLING_RATE = 16_000
#: how clips are resampled, recorded in a sweep's settings (results of another resampler are not mixed in)
RESAMPLER = "soxr_hq"


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
        with open(path, "rb") as handle:
            data, rate = sf.read(handle, dtype="float32", always_2d=True)
    except PermissionError:
        raise AudioLoadError(f"cannot read audio file {path}: permission denied; make it readable (chmod a+r) "
                             "or leave it out of the task's data") from None
    except OSError as error:
        raise AudioLoadError(f"cannot read audio file {path}: {error.strerror or error}") from None
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
    """``wave`` from ``rate`` to ``target`` Hz as ``librosa.resample(res_type="soxr_hq")`` does it:
    soxr's HQ band-limited resampler, then cut or zero-padded to ``ceil(n * (target / rate))`` samples
    (librosa's expression; soxr itself gives the rounded length, one sample fewer at most)."""
    wave = np.asarray(wave, dtype=np.float32)
    if rate == target:
        return wave
    length = int(np.ceil(len(wave) * (float(target) / rate)))
    out = soxr.resample(wave, rate, target, quality=RESAMPLER)[:length]
    return np.pad(out, (0, length - len(out))).astype(np.float32, copy=False)


def duration_seconds(waves: list[np.ndarray], sampling_rate: int = SAMPLING_RATE) -> float:
    return sum(len(w) for w in waves) / sampling_rate
