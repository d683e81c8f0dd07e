"""Turning audio and a prompt into model inputs the way each family's processor expects.

A prompt is ordered segments (``Prompt``): text, audio clips by their index in the list of
waveforms given with it, and, for the families that see (the Omni ones), images and videos
(``Image``, ``Video``: decoded pixels; a video may name its sound track among the waveforms), plus an
optional system turn. A plain string is the usual case, every clip first and then the text. Each
family only declares how one audio item and one text item are written in its chat messages
(``ChatFormat``); the messages then hold the segments in order, and the processor expands the
placeholders and extracts features. A video with its sound track goes to the processor as the Omni
models take it (``load_audio_from_video``: each ~2 s chunk's video tokens, then its audio tokens)
and the model is told so (``use_audio_in_video``). Families differ in how long audio is cut
(``chunk_seconds``: each piece becomes its own audio item, in place) and in how the processor
receives the waveforms (a keyword, or inside the messages). A prompt may hold no audio at all.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SAMPLING_RATE = 16_000


@dataclass(frozen=True, eq=False)
class Image:
    """An image segment: (H, W, 3) uint8 pixels."""

    pixels: np.ndarray


@dataclass(frozen=True, eq=False)
class Video:
    """A video segment: ``frames`` (T, H, W, 3) uint8, sampled at ``fps`` frames per second, and its
    sound track's index in the prompt's waveforms (None: the video goes in silent)."""

    frames: np.ndarray
    fps: float
    audio: int | None = None


Segment = str | int | Image | Video


@dataclass(frozen=True)
class Prompt:
    """One user turn as ordered segments: ``str`` for text, ``int`` for an audio clip (its index in
    the waveforms passed alongside), ``Image`` and ``Video`` for what a family that sees takes, with
    an optional system turn before it. With ``transcription`` (a language code), the prompt is instead
    the family's transcription request for its one clip (Voxtral's ``apply_transcription_request``): no
    text, no system turn.

    ``Prompt(("Audio 1:", 0, "Audio 2:", 1, "Which is louder?"))`` interleaves two clips with text."""

    segments: tuple[Segment, ...]
    system: str | None = None
    transcription: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", tuple(self.segments))
        for segment in self.segments:
            if isinstance(segment, bool) or not isinstance(segment, (str, int, Image, Video)):
                raise TypeError(f"a prompt segment is text (str), a clip index (int), an Image or a Video, not {segment!r}")
        if self.transcription is not None and (self.system is not None or len(self.segments) != 1
                                               or not isinstance(self.segments[0], int)):
            raise ValueError("a transcription request holds one audio clip and nothing else (no text, no system turn)")

    @classmethod
    def of(cls, prompt: str | Prompt, n_clips: int) -> Prompt:
        """``prompt`` itself, or a text prompt as every clip in order followed by the text."""
        return prompt if isinstance(prompt, Prompt) else cls((*range(n_clips), prompt))

    def audio_indices(self) -> list[int]:
        """The clips the prompt uses, in order: its clip segments and its videos' sound tracks."""
        return [s.audio if isinstance(s, Video) else s for s in self.segments
                if isinstance(s, int) or (isinstance(s, Video) and s.audio is not None)]

    def check(self, n_clips: int) -> None:
        """Every one of ``n_clips`` clips appears exactly once (as a clip or a video's sound track)."""
        used = sorted(self.audio_indices())
        if used != list(range(n_clips)):
            raise ValueError(f"prompt segments use clips {used}, but {n_clips} clip(s) were given: use each once")


def chunks(wave: np.ndarray, seconds: float | None) -> list[np.ndarray]:
    """A clip cut into consecutive pieces of at most ``seconds`` (None: the clip whole)."""
    if seconds is None:
        return [wave]
    size = int(seconds * SAMPLING_RATE)
    return [wave[i : i + size] for i in range(0, max(len(wave), 1), size)]


def text_item(text: str) -> dict:
    return {"type": "text", "text": text}


@dataclass
class _Media:
    """What one prompt hands the processor besides its text: audio pieces (per audio slot, in order),
    for each the video whose sound track it is (None: a clip of its own), images and videos."""

    pieces: list[np.ndarray]
    track_of: list[int | None]
    images: list[np.ndarray]
    videos: list[Video]


@dataclass(frozen=True)
class ChatFormat:
    """How a family writes a prompt into its chat template, and hands it to its processor.

    Calling it is the family's ``build_inputs(processor, waves, prompt)``. ``audio_item(wave)`` is the
    content item of one audio piece; ``audio_kwarg`` the processor keyword taking the pieces' waveforms,
    or None when the items carry them and the template tokenizes (Voxtral). ``vision``: the family
    takes ``Image`` and ``Video`` segments (an Omni processor, with ``load_audio_from_video``).
    ``transcribe(processor, wave, language)``: the model inputs of a transcription request, for a
    family whose processor has one (None: it has none)."""

    audio_item: Callable[[np.ndarray], dict] = lambda wave: {"type": "audio"}
    text_item: Callable[[str], dict] = text_item
    chunk_seconds: float | None = None
    audio_kwarg: str | None = "audio"
    #: how the processor pads the audio features, when not as the text (``padding=True`` pads both)
    audio_padding: str | None = None
    vision: bool = False
    transcribe: Callable[[Any, np.ndarray, str], Any] | None = None

    def messages(self, waves: Sequence[np.ndarray], prompt: str | Prompt) -> tuple[list[dict], _Media]:
        """The chat messages (system turn if any, then the user turn in segment order) and the media
        in the order their items appear."""
        prompt = Prompt.of(prompt, len(waves))
        prompt.check(len(waves))
        content, media = [], _Media([], [], [], [])
        for segment in prompt.segments:
            if isinstance(segment, str):
                content.append(self.text_item(segment))
            elif isinstance(segment, (Image, Video)):
                self._check_vision(segment)
                content.append({"type": "image" if isinstance(segment, Image) else "video"})
                if isinstance(segment, Image):
                    media.images.append(segment.pixels)
                    continue
                if segment.audio is not None:  # its sound track: one audio slot, no item of its own
                    media.pieces.append(waves[segment.audio])
                    media.track_of.append(len(media.videos))
                media.videos.append(segment)
            else:
                for piece in chunks(waves[segment], self.chunk_seconds):
                    content.append(self.audio_item(piece))
                    media.pieces.append(piece)
                    media.track_of.append(None)
        system = [{"role": "system", "content": prompt.system}] if prompt.system is not None else []
        return [*system, {"role": "user", "content": content}], media

    def __call__(self, processor, waves: Sequence[np.ndarray], prompt: str | Prompt):
        if isinstance(prompt, Prompt) and prompt.transcription is not None:
            prompt.check(len(waves))
            if self.transcribe is None:
                raise ValueError("this family has no transcription request: give the prompt as a chat turn")
            return self.transcribe(processor, waves[0], prompt.transcription)
        conversation, media = self.messages(waves, prompt)
        if self.audio_kwarg is None:  # the template reads the audio from the items (mistral-common: no generation prompt to add)
            return processor.apply_chat_template(conversation, tokenize=True, return_dict=True, return_tensors="pt")
        text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        padding = dict(padding=True) if self.audio_padding is None else dict(
            text_kwargs=dict(padding=True), audio_kwargs=dict(padding=self.audio_padding)
        )
        audio = {self.audio_kwarg: media.pieces, "sampling_rate": SAMPLING_RATE} if media.pieces else {}
        inputs = processor(text=text, **audio, **_visual_kwargs(media), return_tensors="pt", **padding)
        if any(index is not None for index in media.track_of):
            inputs["use_audio_in_video"] = True  # the model numbers the interleaved chunks by time (TMRoPE)
        return inputs

    def dropped_media(self, processor, kinds) -> dict[str, str]:
        """Of the media ``kinds`` (``"image"``, ``"video"``), those a prompt cannot carry to the model
        through ``processor``, each with why: a family that does not see, or a chat template that
        writes no placeholder for an item of that kind (the processor would then find none to expand)."""
        dropped = {}
        for kind in kinds:
            if not self.vision:
                dropped[kind] = f"the family takes no {kind}s: only the Omni families see"
                continue
            token = getattr(processor, f"{kind}_token", None)
            probe = [{"role": "user", "content": [{"type": kind}, self.text_item("?")]}]
            if token and token not in processor.apply_chat_template(probe, add_generation_prompt=True, tokenize=False):
                dropped[kind] = f"its chat template writes no {token} placeholder for {kind} items: it leaves {kind}s out"
        return dropped

    def _check_vision(self, segment) -> None:
        if not self.vision:
            raise ValueError(f"this family takes no {type(segment).__name__.lower()}s: only the Omni families see.")


def _visual_kwargs(media: _Media) -> dict:
    """The processor's keywords for a prompt's images and videos. A video with its sound track is
    interleaved with it (``load_audio_from_video``, the audio given per slot); the model numbers
    every video of such a prompt as carrying sound, so all must, and all share one frame rate."""
    kwargs: dict = {}
    if media.images:
        kwargs["images"] = media.images
    if not media.videos:
        return kwargs
    rates = {video.fps for video in media.videos}
    if len(rates) > 1:
        raise ValueError(f"the videos of one prompt must share a frame rate, not {sorted(rates)}: sample them alike.")
    kwargs.update(videos=[video.frames for video in media.videos], videos_kwargs={"fps": rates.pop()})
    with_sound = [video.audio is not None for video in media.videos]
    if any(with_sound):
        if not all(with_sound):
            raise ValueError("a prompt mixes videos with and without a sound track; the model takes either, not both.")
        kwargs.update(load_audio_from_video=True, audio_from_video_indices=media.track_of)
    return kwargs


def wav_bytes(wave: np.ndarray) -> bytes:
    """A mono clip as a 32-bit float WAV file (WAVE_FORMAT_IEEE_FLOAT), written by hand so that the
    core needs no audio library: RIFF header, ``fmt`` chunk, ``fact`` chunk (required for non-PCM
    data), then the little-endian samples."""
    data = np.ascontiguousarray(wave, dtype="<f4").tobytes()
    n_samples = len(data) // 4
    fmt = struct.pack("<HHIIHHH", 3, 1, SAMPLING_RATE, 4 * SAMPLING_RATE, 4, 32, 0)  # float, mono, no extension
    chunks = b"".join([
        b"fmt ", struct.pack("<I", len(fmt)), fmt,
        b"fact", struct.pack("<II", 4, n_samples),
        b"data", struct.pack("<I", len(data)), data,
    ])
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def wav_base64(wave: np.ndarray) -> str:
    """A clip as base64 WAV, for processors that load audio themselves from a message (Voxtral)."""
    return base64.b64encode(wav_bytes(wave)).decode("ascii")
