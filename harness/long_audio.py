"""Audio longer than a model takes is never cut silently.

Each family declares the longest clip it takes as one audio item (``max_clip_seconds``; ``kvprune
families`` lists them: 300 s for Qwen2.5-Omni, 30 s for Qwen2-Audio, Aero-1 and Gemma-3n, none for
Voxtral and Phi-4, for instance). A clip beyond it (a file, or one clip a task's channel policy made
of it) is handled by an explicit policy, chosen per sweep or per task and recorded with every result:

* ``split`` (default): cut into consecutive clips of at most that length, each its own audio item
  standing in order where the clip stood in the prompt's segments (what Qwen2-Audio's and Aero-1's
  recipes do with long audio);
* ``truncate``: keep the first ``max_clip_seconds``; the result row says so and the report warns;
* ``error``: the sample becomes an error row.

A processor may cut shorter than its family could take: the feature extractor of Qwen2.5-Omni's
checkpoints pads and truncates to its ``chunk_length`` (300 s; 30 s in the demo model), though its
encoder windows audio of any length. For families that feed a clip to their encoder whole (one
encoder input per clip), ``whole_clips`` lets the feature extractor take the longest clip for the
call. After the prompt is built, ``received_seconds`` compares the audio tokens the model got with
what the family's audio format gives for the clips sent, so a cut anywhere else is caught too.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from .audio import SAMPLING_RATE, duration_seconds

if TYPE_CHECKING:
    from kvprune.models.prompting import Prompt

POLICIES = ("split", "truncate", "error")
DEFAULT_POLICY = "split"
#: a processor counts audio tokens its own way; a shortfall beyond this fraction (and 2 tokens) is a cut
TOKEN_TOLERANCE = 0.02


class LongAudioError(ValueError):
    """A clip is longer than the model takes and the policy says so, or the processor cut it."""


@dataclass(frozen=True)
class FittedAudio:
    """The clips a model gets, and what was done to fit them (None: nothing)."""

    waves: list[np.ndarray]
    note: str | None = None
    #: per clip given, how many of ``waves`` it became (empty: one each)
    pieces: tuple[int, ...] = ()

    def prompt(self, prompt: str | Prompt) -> str | Prompt:
        """``prompt`` for the fitted clips: each split clip's pieces stand in order where it stood."""
        if not self.pieces:
            return prompt
        from kvprune.models.prompting import Prompt, Video  # kvprune.models loads transformers: not before audio is fitted

        prompt = Prompt.of(prompt, len(self.pieces))
        starts = np.cumsum([0, *self.pieces]).tolist()
        segments = []
        for segment in prompt.segments:
            if isinstance(segment, Video) and segment.audio is not None:
                if self.pieces[segment.audio] > 1:
                    raise LongAudioError("a video's sound track is longer than the model takes as one audio item and "
                                         "cannot be split from its frames; set the long-audio policy to truncate.")
                segments.append(replace(segment, audio=starts[segment.audio]))
            elif isinstance(segment, int):
                segments += range(starts[segment], starts[segment + 1])
            else:
                segments.append(segment)
        return replace(prompt, segments=tuple(segments))


def fit_clips(waves: list[np.ndarray], max_seconds: float | None, policy: str, model: str = "the model") -> FittedAudio:
    """Apply ``policy`` to every clip longer than ``max_seconds`` (None: no limit)."""
    if policy not in POLICIES:
        raise ValueError(f"long-audio policy {policy!r} is invalid; choose one of {', '.join(POLICIES)}.")
    longest = max((len(w) for w in waves), default=0) / SAMPLING_RATE
    if max_seconds is None or longest <= max_seconds:
        return FittedAudio(list(waves))
    size = int(max_seconds * SAMPLING_RATE)
    long_clips = sum(len(w) > size for w in waves)
    if policy == "error":
        raise LongAudioError(
            f"a clip of {longest:.1f} s is longer than the {max_seconds:g} s {model} takes as one audio item; "
            "the long-audio policy is 'error' (use split or truncate to run it)."
        )
    if policy == "truncate":
        fitted = [w[:size] for w in waves]
        return FittedAudio(fitted, f"truncated {long_clips} clip(s) to {max_seconds:g} s (longest {longest:.1f} s)")
    from kvprune.models.prompting import chunks  # as in FittedAudio.prompt

    split = [chunks(w, max_seconds) for w in waves]
    fitted = [piece for pieces in split for piece in pieces]
    return FittedAudio(fitted, f"split {long_clips} clip(s) into {len(fitted)} clips of at most {max_seconds:g} s",
                       tuple(len(pieces) for pieces in split))


@contextmanager
def whole_clips(processor, family, config, waves: list[np.ndarray]):
    """Let a Whisper-style feature extractor take the longest of ``waves`` whole for the duration of
    the block, where the family feeds each clip to its encoder as one input (families that cut audio
    into encoder chunks themselves are left alone)."""
    extractor = getattr(processor, "feature_extractor", None)
    longest = max((len(w) for w in waves), default=0)
    frames = family.prompting.audio_format.frames(config, longest / SAMPLING_RATE)
    one_input = len(family.prompting.audio_format.pieces(config, frames)) == 1
    if not (one_input and hasattr(extractor, "n_samples") and longest > extractor.n_samples):
        yield
        return
    saved = {name: getattr(extractor, name) for name in ("n_samples", "chunk_length", "nb_max_frames")}
    extractor.n_samples = longest
    extractor.chunk_length = longest / extractor.sampling_rate
    extractor.nb_max_frames = longest // extractor.hop_length
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(extractor, name, value)


def received_seconds(family, config, waves: list[np.ndarray], audio_tokens: int, truncate_ok: bool) -> float:
    """Seconds of audio the model received: those sent, checked against its audio tokens. Fewer
    tokens than the family's format gives for the clips sent means something cut them: an error,
    unless the policy accepts truncation (then the share received is returned)."""
    sent = sum(len(w) for w in waves) / SAMPLING_RATE
    try:
        audio = family.prompting.audio_format
        expected = sum(audio.tokens(config, audio.frames(config, len(w) / SAMPLING_RATE)) for w in waves)
    except (AttributeError, NotImplementedError, TypeError):  # a format that cannot say: trust the processor
        return sent
    if audio_tokens >= expected * (1 - TOKEN_TOLERANCE) - 2:
        return sent
    received = sent * audio_tokens / expected
    if truncate_ok:
        return received
    raise LongAudioError(
        f"the processor gave {audio_tokens} audio tokens for {sent:.1f} s of audio, where {family.display_name} "
        f"makes {expected}: it cut the audio to about {received:.1f} s. Set the long-audio policy to 'truncate' "
        "to accept that."
    )


def model_inputs(loaded, waves: list[np.ndarray], prompt: str | Prompt, policy: str) -> dict:
    """A prompt's model inputs (``inputs``) with ``waves`` fitted to what ``loaded`` (a
    ``LoadedModel``) takes under ``policy`` (a split clip's pieces stand where it stood in the
    prompt's segments), and what a result row records about its audio: the seconds of the files,
    the seconds the model received, the clips it got, what was done to fit them (``long_audio``;
    None: nothing) and the audio tokens."""
    family = loaded.family
    fitted = fit_clips(waves, family.prompting.max_clip_seconds, policy, family.display_name)
    config = family.entry(loaded.model).config
    with whole_clips(loaded.processor, family, config, fitted.waves):
        inputs = loaded.build_inputs(fitted.waves, fitted.prompt(prompt))
    tokens = loaded.audio_tokens(inputs["input_ids"])
    received = received_seconds(family, config, fitted.waves, tokens, truncate_ok=policy == "truncate")
    sent, note = duration_seconds(fitted.waves), fitted.note
    if received < sent:
        note = "; ".join(filter(None, [note, f"the processor kept about {received:.1f} of {sent:.1f} s"]))
    return dict(
        inputs=inputs, audio_seconds=duration_seconds(waves), audio_seconds_received=round(received, 3),
        audio_clips=len(fitted.waves), long_audio=note, audio_tokens=tokens,
    )
