"""Voxtral (Mini-3B, Small-24B): Whisper encoder, projector, Llama decoder.

Its processor loads audio from the message itself and pads it to 30 s chunks stacked on the
batch axis; clips are handed over as base64 WAV of the already resampled waveform, each an audio
chunk of the message in prompt order. A prompt may also be its transcription request (one clip and a
language: ``[INST][BEGIN_AUDIO][AUDIO]...[/INST]lang:xx[TRANSCRIBE]``), as its model card transcribes.
"""

import math
from dataclasses import dataclass

import torch

from . import tiny
from .audio_format import AudioFormat
from .base import ModelFamily, register_family
from .parts import Prompting, Tiny
from .prompting import SAMPLING_RATE, ChatFormat, wav_base64


def transcription_request(processor, wave, language: str):
    """The processor's transcription request for one resampled clip (which it writes to a 16-bit WAV
    file and reads back, as it does with an audio file; ``model_id`` only names the model in the
    request, which the tokens do not carry)."""
    return processor.apply_transcription_request(
        audio=[wave], model_id="voxtral", language=language, sampling_rate=SAMPLING_RATE, format=["wav"], return_tensors="pt"
    )


build_inputs = ChatFormat(
    audio_item=lambda wave: {"type": "audio", "base64": wav_base64(wave)}, audio_kwarg=None, transcribe=transcription_request
)


@dataclass(frozen=True)
class VoxtralAudio(AudioFormat):
    """Audio padded to whole chunks of 2*max_source_positions frames (30 s in the checkpoints),
    stacked on the batch axis; the projector merges intermediate_size/hidden_size (4) encoder
    frames into one token, so 375 tokens per 30 s chunk (12.5 tokens/s)."""

    def pieces(self, config, frames):
        chunk = 2 * config.audio_config.max_source_positions
        return [chunk] * math.ceil(frames / chunk)

    def piece_tokens(self, config, frames):
        audio = config.audio_config
        return audio.max_source_positions // (audio.intermediate_size // audio.hidden_size)

    def features(self, config, clip_frames, generator=None):
        pieces = [piece for frames in clip_frames for piece in self.pieces(config, frames)]
        shape = (len(pieces), config.audio_config.num_mel_bins, 2 * config.audio_config.max_source_positions)
        return dict(input_features=torch.randn(*shape, generator=generator))


TINY = dict(
    audio_config=dict(
        num_mel_bins=tiny.MELS,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_size=16,
        max_source_positions=16,  # 32-frame chunks of 4 tokens
    ),
    text_config=dict(**tiny.TEXT, head_dim=16),
    audio_token_id=tiny.AUDIO_TOKEN,
)

VOXTRAL = register_family(
    ModelFamily(
        name="voxtral",
        display_name="Voxtral",
        model_class="VoxtralForConditionalGeneration",
        prompting=Prompting(
            audio_format=VoxtralAudio(),
            llm_tokens_per_second=12.5,
            build_inputs=build_inputs,
            long_audio="30 s chunks stacked on the encoder's batch axis, one placeholder run per clip",
        ),
        tiny=Tiny(TINY),
        notes="A bare VoxtralConfig has audio_token_id=None; real checkpoints and the processor say 24.",
    )
)
