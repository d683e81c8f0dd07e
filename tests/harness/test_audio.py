"""Audio files to mono 16 kHz float32, whatever their rate, channels and format."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from kvprune.harness.audio import SAMPLING_RATE, AudioLoadError, load_audio, resample


def _dominant_frequency(wave: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(wave))
    return float(np.fft.rfftfreq(len(wave), 1 / rate)[spectrum.argmax()])


@pytest.mark.parametrize("rate,suffix", [(44_100, ".wav"), (8_000, ".flac"), (16_000, ".wav")])
def test_stereo_files_become_mono_16khz_with_their_content(tmp_path, rate, suffix):
    seconds = 1.5
    t = np.arange(int(rate * seconds)) / rate
    left, right = 0.5 * np.sin(2 * np.pi * 440 * t), 0.3 * np.sin(2 * np.pi * 440 * t)
    path = tmp_path / f"clip{suffix}"
    sf.write(path, np.stack([left, right], axis=1), rate)
    wave = load_audio(path)
    assert wave.dtype == np.float32 and wave.ndim == 1
    assert len(wave) == int(round(len(t) * SAMPLING_RATE / rate))
    assert _dominant_frequency(wave, SAMPLING_RATE) == pytest.approx(440, abs=1)
    # the downmix is the mean of the channels: amplitude 0.4 (within the file format's precision)
    assert np.abs(wave[len(wave) // 4 : 3 * len(wave) // 4]).max() == pytest.approx(0.4, abs=0.01)


def test_resampling_keeps_a_band_limited_tone():
    rate, target = 48_000, 16_000
    t = np.arange(rate) / rate
    out = resample(np.sin(2 * np.pi * 1000 * t).astype(np.float32), rate, target)
    reference = np.sin(2 * np.pi * 1000 * np.arange(target) / target)
    assert len(out) == target
    assert np.abs(out[100:-100] - reference[100:-100]).max() < 1e-3


def test_missing_empty_and_unreadable_files_are_named(tmp_path):
    with pytest.raises(AudioLoadError, match="audio file not found: .*absent.wav"):
        load_audio(tmp_path / "absent.wav")
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF but not really")
    with pytest.raises(AudioLoadError, match="cannot read audio file .*broken.wav"):
        load_audio(broken)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros((0, 1)), SAMPLING_RATE)
    with pytest.raises(AudioLoadError, match="audio file is empty"):
        load_audio(empty)
