"""Audio files to mono 16 kHz float32, whatever their rate, channels and format."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import soxr

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
    assert len(wave) == int(np.ceil(len(t) * (SAMPLING_RATE / rate)))
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


def _librosa_steps(path, sr: int = SAMPLING_RATE) -> np.ndarray:
    """``librosa.load(path, sr=sr)`` (librosa 0.11) step by step as its source does it, without librosa:
    soundfile's float32 frames transposed to (channels, n), ``to_mono``'s mean over channels,
    ``resample``'s soxr call at res_type "soxr_hq", then ``fix_length`` to ``ceil(n * ratio)``."""
    with sf.SoundFile(path) as handle:
        native = handle.samplerate
        y = handle.read(dtype=np.float32, always_2d=False).T
    if y.ndim > 1:
        y = np.mean(y, axis=tuple(range(y.ndim - 1)))
    if native == sr:
        return y
    ratio = float(sr) / native
    n_samples = int(np.ceil(y.shape[-1] * ratio))
    y_hat = soxr.resample(y, native, sr, quality="soxr_hq")
    y_hat = y_hat[:n_samples] if len(y_hat) > n_samples else np.pad(y_hat, (0, n_samples - len(y_hat)), mode="constant")
    return np.asarray(y_hat, dtype=y.dtype)


CASES = [(44_100, 1, ".wav", 1.0), (48_000, 2, ".flac", 0.7313), (8_000, 2, ".wav", 1.25), (22_050, 1, ".flac", 0.3333),
         (16_000, 2, ".wav", 0.5), (11_025, 1, ".wav", 0.0007)]


def _noise_file(tmp_path, rate, channels, suffix, seconds):
    path = tmp_path / f"clip_{rate}_{channels}{suffix}"
    noise = np.random.default_rng(rate + channels).uniform(-0.5, 0.5, (max(1, int(rate * seconds)), channels))
    sf.write(path, noise, rate)
    return path


@pytest.mark.parametrize("rate,channels,suffix,seconds", CASES)
def test_loading_equals_librosas_load_at_16khz_to_the_bit(tmp_path, rate, channels, suffix, seconds):
    """The AudioMarathon scripts' loader, ``librosa.load(path, sr=16000)``: mono by averaging, soxr_hq."""
    path = _noise_file(tmp_path, rate, channels, suffix, seconds)
    wave = load_audio(path)
    assert wave.dtype == np.float32 and np.array_equal(wave, _librosa_steps(path))
    librosa = pytest.importorskip("librosa")  # not a dependency: where it is installed, against librosa itself
    reference, sr = librosa.load(path, sr=SAMPLING_RATE)
    assert sr == SAMPLING_RATE and reference.dtype == wave.dtype and np.array_equal(wave, reference)


def test_the_audiomarathon_protocol_hears_what_its_scripts_load(tmp_path):
    """Every AudioMarathon task under ``--protocol audiomarathon`` reads its clips as their scripts'
    ``librosa.load(path, sr=16000)``: here a stereo 44.1 kHz GTZAN file."""
    from tests.support import task_fixtures
    from kvprune.harness.channels import MEAN
    from kvprune.harness.tasks.task import get_task, list_tasks

    marathon = [get_task(name).under("audiomarathon") for name in list_tasks() if "audiomarathon" in get_task(name).protocols]
    assert len(marathon) == 10 and all(task.channels == MEAN for task in marathon)  # librosa's mono: the mean
    task_fixtures.gtzan(tmp_path)
    gtzan = next(task for task in marathon if task.name == "gtzan@audiomarathon")
    sample = gtzan.load(tmp_path)[0]
    stereo = _noise_file(tmp_path, 44_100, 2, ".wav", 0.8)
    sample.audio[0].write_bytes(stereo.read_bytes())
    waves, _ = gtzan.render(sample).load(gtzan.channels)
    assert len(waves) == 1 and np.array_equal(waves[0], _librosa_steps(stereo))
