"""Turning audio and a prompt into model inputs the way each family's processor expects.

A prompt is ordered segments (``Prompt``): text, and audio clips by their index in the list of
waveforms given with it, plus an optional system turn. A plain string is the usual case, every clip
first and then the text. Each family only declares how one audio item and one text item are written
in its chat messages (``ChatFormat``); the messages then hold the segments in order, and the
processor expands the audio placeholders and extracts features. Families differ in how long audio
is cut (``chunk_seconds``: each piece becomes its own audio item, in place) and in how the
processor receives the waveforms (a keyword, or inside the messages).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SAMPLING_RATE = 16_000


@dataclass(frozen=True)
class Prompt:
    """One user turn as ordered segments: ``str`` for text, ``int`` for an audio clip (its index in
    the waveforms passed alongside), with an optional system turn before it.

    ``Prompt(("Audio 1:", 0, "Audio 2:", 1, "Which is louder?"))`` interleaves two clips with text."""

    segments: tuple[str | int, ...]
    system: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", tuple(self.segments))
        for segment in self.segments:
            if isinstance(segment, bool) or not isinstance(segment, (str, int)):
                raise TypeError(f"a prompt segment is text (str) or a clip index (int), not {segment!r}")

    @classmethod
    def of(cls, prompt: str | Prompt, n_clips: int) -> Prompt:
        """``prompt`` itself, or a text prompt as every clip in order followed by the text."""
        return prompt if isinstance(prompt, Prompt) else cls((*range(n_clips), prompt))

    def check(self, n_clips: int) -> None:
        """Every one of ``n_clips`` clips appears exactly once."""
        used = sorted(s for s in self.segments if isinstance(s, int))
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


@dataclass(frozen=True)
class ChatFormat:
    """How a family writes a prompt into its chat template, and hands it to its processor.

    Calling it is the family's ``build_inputs(processor, waves, prompt)``. ``audio_item(wave)`` is the
    content item of one audio piece; ``audio_kwarg`` the processor keyword taking the pieces' waveforms,
    or None when the items carry them and the template tokenizes (Voxtral)."""

    audio_item: Callable[[np.ndarray], dict] = lambda wave: {"type": "audio"}
    text_item: Callable[[str], dict] = text_item
    chunk_seconds: float | None = None
    audio_kwarg: str | None = "audio"
    #: how the processor pads the audio features, when not as the text (``padding=True`` pads both)
    audio_padding: str | None = None

    def messages(self, waves: Sequence[np.ndarray], prompt: str | Prompt) -> tuple[list[dict], list[np.ndarray]]:
        """The chat messages (system turn if any, then the user turn in segment order) and the audio
        pieces in the order their items appear."""
        prompt = Prompt.of(prompt, len(waves))
        prompt.check(len(waves))
        content, pieces = [], []
        for segment in prompt.segments:
            if isinstance(segment, str):
                content.append(self.text_item(segment))
                continue
            for piece in chunks(waves[segment], self.chunk_seconds):
                content.append(self.audio_item(piece))
                pieces.append(piece)
        system = [{"role": "system", "content": prompt.system}] if prompt.system is not None else []
        return [*system, {"role": "user", "content": content}], pieces

    def __call__(self, processor, waves: Sequence[np.ndarray], prompt: str | Prompt):
        conversation, pieces = self.messages(waves, prompt)
        if self.audio_kwarg is None:  # the template reads the audio from the items (mistral-common: no generation prompt to add)
            return processor.apply_chat_template(conversation, tokenize=True, return_dict=True, return_tensors="pt")
        text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        padding = dict(padding=True) if self.audio_padding is None else dict(
            text_kwargs=dict(padding=True), audio_kwargs=dict(padding=self.audio_padding)
        )
        return processor(text=text, **{self.audio_kwarg: pieces}, sampling_rate=SAMPLING_RATE, return_tensors="pt", **padding)


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
