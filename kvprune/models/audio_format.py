"""How a family's processor turns audio into encoder inputs, and how many LLM tokens come out.

Mel frames are the common unit. Speed measurements start from seconds of audio (``frames``), the tests from
the audio tokens they want per clip (``frames_for``); both then ask for ``features`` of clips of so
many frames, and put ``placeholders`` for ``tokens(frames)`` audio tokens in the prompt. A family's
own format lives in its module; the Whisper-chunk format here is shared by Qwen2-Audio and Aero-1.
The numbers a format reads (window, chunk length, mel bins) come from the model config, so one
format serves the real shapes and the tiny ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FRAMES_PER_SECOND = 100  # log-mel hop of 10 ms, in every family here


def whisper_tokens(frames: int) -> int:
    """Embeddings a Whisper-style encoder gives for ``frames`` mel frames: conv stride 2, then pool 2."""
    after_conv = (frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


def padding_mask(lengths: list[int], width: int) -> torch.Tensor:
    """(len(lengths), width) bool: True on the first ``length`` frames of each row."""
    return torch.arange(width)[None] < torch.tensor(lengths)[:, None]


@dataclass(frozen=True)
class AudioFormat:
    """One family's audio inputs. A clip of ``frames`` mel frames becomes one or more encoder
    inputs (``pieces``: 30 s chunks for some families), each giving ``piece_tokens`` LLM tokens."""

    def frames(self, config, seconds: float) -> int:
        """Mel frames the processor makes of ``seconds`` of audio."""
        return max(1, round(seconds * FRAMES_PER_SECOND))

    def pieces(self, config, frames: int) -> list[int]:
        """Frame counts of the encoder inputs (rows on the features' batch axis) one clip becomes."""
        return [frames]

    def piece_tokens(self, config, frames: int) -> int:
        raise NotImplementedError

    def fixed_tokens(self, config) -> int | None:
        """Audio tokens of every clip whatever its length, for families that pad clips to one size."""
        return None

    def tokens(self, config, frames: int) -> int:
        """LLM audio tokens of one clip of ``frames`` mel frames."""
        return sum(self.piece_tokens(config, piece) for piece in self.pieces(config, frames))

    def frames_for(self, config, tokens: int) -> int:
        """The shortest clip (in frames) that gives exactly ``tokens`` audio tokens; an error names the
        nearest counts this family can give when none does (Voxtral pads audio to whole chunks)."""
        if tokens < 1:
            raise ValueError(f"a clip has at least one audio token, not {tokens}")
        high = 1
        while self.tokens(config, high) < tokens:
            high *= 2
        low = high // 2  # tokens(low) < tokens <= tokens(high); tokens never fall as frames grow
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self.tokens(config, middle) < tokens else (low, middle)
        if self.tokens(config, high) != tokens:
            below = self.tokens(config, low) if low else 0
            raise ValueError(
                f"{type(self).__name__} cannot make a clip of {tokens} audio tokens with this config; "
                f"the nearest clips give {below} or {self.tokens(config, high)}"
            )
        return high

    def features(self, config, clip_frames: list[int], generator: torch.Generator | None = None) -> dict:
        """Random encoder inputs (the model's keyword arguments) for clips of these frame counts, in
        batch order, shaped as the family's processor shapes them."""
        raise NotImplementedError

    def placeholders(self, config, audio_token_id: int, n_tokens: int) -> list[int]:
        """The prompt's token ids for one clip of ``n_tokens`` audio tokens."""
        return [audio_token_id] * n_tokens


@dataclass(frozen=True)
class WhisperChunkAudio(AudioFormat):
    """Qwen2-Audio's Whisper encoder, which Aero-1 shares: chunks of 2*max_source_positions frames
    (30 s in the checkpoints) stacked on the batch axis, each masked to its real length; 750 tokens
    per full 30 s chunk (25 tokens/s). The keyword names are the model's."""

    features_name: str = "input_features"
    mask_name: str = "feature_attention_mask"

    def pieces(self, config, frames):
        full, rest = divmod(frames, 2 * config.audio_config.max_source_positions)
        return [2 * config.audio_config.max_source_positions] * full + ([rest] if rest else [])

    def piece_tokens(self, config, frames):
        return whisper_tokens(frames)

    def features(self, config, clip_frames, generator=None):
        pieces = [piece for frames in clip_frames for piece in self.pieces(config, frames)]
        chunk = 2 * config.audio_config.max_source_positions
        mels = torch.randn(len(pieces), config.audio_config.num_mel_bins, chunk, generator=generator)
        return {self.features_name: mels, self.mask_name: padding_mask(pieces, chunk).long()}
