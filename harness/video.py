"""Video and image files as the Omni models take them: frames sampled as Qwen's own video loader
(``qwen-omni-utils``' ``fetch_video``) samples them, the sound track as a mono 16 kHz waveform, and
images as RGB pixels.

Decoding is PyAV's (``av`` on PyPI: FFmpeg's libraries in the wheel, so it installs with pip alone on
Linux, macOS and Windows, reads every container and codec FFmpeg does, and decodes both the frames and
the sound track of one file; transformers' own video loader uses it by default). torchvision's video
reading is deprecated, decord is unmaintained and has no wheels for recent Pythons, and torchcodec
needs a system FFmpeg and wheels matched to one torch release.

Sampling (``frame_indices``): ``frames`` given, that many (rounded to a multiple of 2, the models'
temporal patch); else ``fps`` per second of video (default 2), at least 4 and at most 768, rounded
down to a multiple of 2; then evenly spaced frames over the whole video (``linspace(0, n - 1)``,
rounded), and the rate the model is told is the frames kept per second of video.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .audio import SAMPLING_RATE, AudioLoadError, check_samples, resample

FPS = 2.0
MIN_FRAMES, MAX_FRAMES, FRAME_FACTOR = 4, 768, 2


class VideoLoadError(ValueError):
    """A video or image file is missing or unreadable; the message names it."""


def frame_indices(total: int, video_fps: float, frames: int | None = None, fps: float = FPS) -> tuple[list[int], float]:
    """Which of ``total`` frames (at ``video_fps``) a model gets, and the rate they stand for."""
    if total < 1:
        raise ValueError("a video needs at least one frame")
    if frames is not None:
        count = max(FRAME_FACTOR, round(frames / FRAME_FACTOR) * FRAME_FACTOR)
    else:
        wanted = total / video_fps * fps
        ceiling = max(MIN_FRAMES, min(MAX_FRAMES, total) // FRAME_FACTOR * FRAME_FACTOR)
        count = int(min(max(wanted, MIN_FRAMES), ceiling) // FRAME_FACTOR * FRAME_FACTOR)
    indices = np.linspace(0, total - 1, count).round().astype(int).tolist()
    return indices, count / total * video_fps


def _pyav():
    """PyAV, imported when a video is read (tasks without video never load FFmpeg's libraries)."""
    import av

    return av


def read_video(path: str | Path, frames: int | None = None, fps: float = FPS) -> tuple[np.ndarray, float]:
    """The sampled frames of ``path`` as (T, H, W, 3) uint8, and their rate (module docstring)."""
    path = _existing(path, "video")
    av = _pyav()
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            decoded = list(container.decode(stream))
            rate = float(stream.average_rate or stream.guessed_rate or 0) or len(decoded) / float(container.duration / av.time_base)
    except (av.FFmpegError, IndexError, ZeroDivisionError, TypeError) as error:
        raise VideoLoadError(f"cannot read the frames of video file {path}: {error}") from None
    if not decoded:
        raise VideoLoadError(f"video file {path} holds no frame")
    indices, sample_fps = frame_indices(len(decoded), rate, frames, fps)
    return np.stack([decoded[i].to_ndarray(format="rgb24") for i in indices]), sample_fps


def read_sound(path: str | Path) -> np.ndarray | None:
    """The sound track of a video file, its channels averaged, at 16 kHz; None when it has none."""
    path = _existing(path, "video")
    av = _pyav()
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                return None
            stream = container.streams.audio[0]
            chunks = [_channels_first(frame) for frame in container.decode(stream)]
            rate = stream.rate
    except av.FFmpegError as error:
        raise VideoLoadError(f"cannot read the sound track of video file {path}: {error}") from None
    if not chunks:
        return None
    data = _as_float(np.concatenate(chunks, axis=1)).T  # (samples, channels)
    try:
        check_samples(data, path)
    except AudioLoadError as error:
        raise VideoLoadError(str(error)) from None
    return resample(data.mean(axis=1), rate, SAMPLING_RATE)


def read_image(path: str | Path) -> np.ndarray:
    """An image file as (H, W, 3) uint8 RGB."""
    from PIL import Image, UnidentifiedImageError

    path = _existing(path, "image")
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError) as error:
        raise VideoLoadError(f"cannot read image file {path}: {error}") from None


def _channels_first(frame) -> np.ndarray:
    """One decoded audio frame as (channels, samples): planar formats come so, packed ones interleaved."""
    data = frame.to_ndarray()
    return data if frame.format.is_planar else data.reshape(-1, len(frame.layout.channels)).T


def _as_float(data: np.ndarray) -> np.ndarray:
    """Decoded samples as float32 in [-1, 1], whatever the codec's sample format."""
    if np.issubdtype(data.dtype, np.integer):
        return (data.astype(np.float32) / np.iinfo(data.dtype).max).astype(np.float32)
    return data.astype(np.float32, copy=False)


def _existing(path, what: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise VideoLoadError(f"{what} file not found: {path}")
    return path
