"""Turning audio and a question into model inputs the way each family's processor expects.

Most families render a chat template whose user turn holds one audio item per clip followed by the
text, then let the processor expand the audio placeholders and extract features. Families differ
in how long audio is cut (``chunk_seconds``) and in the processor's keyword for audio.
"""

from __future__ import annotations

import base64
import struct

import numpy as np

SAMPLING_RATE = 16_000


def split_chunks(waves: list[np.ndarray], seconds: float | None) -> list[np.ndarray]:
    """Cut every clip into consecutive pieces of at most ``seconds`` (None: keep clips whole)."""
    if seconds is None:
        return list(waves)
    size = int(seconds * SAMPLING_RATE)
    return [wave[i : i + size] for wave in waves for i in range(0, max(len(wave), 1), size)]


def user_turn(n_audio: int, prompt: str, audio_item: dict) -> list[dict]:
    content = [dict(audio_item) for _ in range(n_audio)] + [{"type": "text", "text": prompt}]
    return [{"role": "user", "content": content}]


def chat_template_inputs(processor, waves, prompt, *, audio_item=None, audio_kwarg="audio", audio_padding=None):
    """Render the chat template as text, then let the processor expand placeholders and featurize.
    ``audio_padding`` pads the audio features its own way (else the text's ``padding=True`` applies
    to both)."""
    conversation = user_turn(len(waves), prompt, audio_item or {"type": "audio"})
    text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    padding = dict(padding=True) if audio_padding is None else dict(
        text_kwargs=dict(padding=True), audio_kwargs=dict(padding=audio_padding)
    )
    return processor(text=text, **{audio_kwarg: waves}, sampling_rate=SAMPLING_RATE, return_tensors="pt", **padding)


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
