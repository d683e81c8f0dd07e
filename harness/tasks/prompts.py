"""A task's prompt as ordered segments: text templates and audio clips interleaved, an optional system turn.

In a task file, ``prompt`` is either one text template (every clip first, then the text: the usual
single-turn prompt) or a list of segments, in the order the model receives them::

    prompt:
      - {audio: clips, label: "Audio {i}:", label_single: false}   # the item's clips, labelled when several
      - {text: "{question}\\n{options}\\n"}
      - {audio: uncut}                                              # an audio file the layout names
    system: You are a helpful assistant.                            # optional system turn
    option_format: "<{letter}>: {text}"                             # one option ({letter}, {text})
    option_separator: "\\n"                                          # between options in {options}

A text template is a ``str.format`` template over ``{question}``, ``{options}``, ``{letters}`` (``A,
B, C, or D``) and any metadata field the layout keeps for the item (``{global_caption}``).
``{audio: clips}`` is every clip of the item in order; ``{audio: <name>}`` one audio file the layout
keeps under that name (``named_audio``). A ``label`` (``{i}``: the clip's 1-based number within the
segment) goes before each clip, and before a lone clip only if ``label_single`` (default true). A file
that the task's channel policy turns into several clips (``split``, ``foa_stereo``) contributes each
of them, then the policy's legend text.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..audio import load_clips
from ..channels import MEAN, Channels

if TYPE_CHECKING:
    import numpy as np

    from kvprune.models.prompting import Prompt

    from .sample import Sample

LETTERS = string.ascii_uppercase
ALL_CLIPS = "clips"
FIXED_FIELDS = ("question", "options", "letters")


class PromptConfigError(ValueError):
    """A prompt in a task file is malformed; the message says which segment and how to fix it."""


@dataclass(frozen=True)
class ClipRef:
    """One clip of a rendered prompt: clip ``clip`` (0-based, per the channel policy) of file ``path``."""

    path: Path
    clip: int = 0


@dataclass(frozen=True)
class RenderedPrompt:
    """What one sample's prompt holds, before any audio is read: text and clip references in order."""

    segments: tuple[str | ClipRef, ...]
    system: str | None = None

    @property
    def text(self) -> str:
        """The prompt as text for hashing and display: the text alone when the prompt is the usual
        shape (every clip, then one text, no system turn), else JSON of the segments."""
        *clips, last = self.segments or ("",)
        if self.system is None and isinstance(last, str) and all(isinstance(c, ClipRef) for c in clips):
            return last
        shown = [s if isinstance(s, str) else [s.path.name, s.clip] for s in self.segments]
        return json.dumps({"system": self.system, "segments": shown}, ensure_ascii=False)

    @property
    def files(self) -> tuple[Path, ...]:
        """The audio files the prompt reads, each once, in order of first use."""
        return tuple(dict.fromkeys(s.path for s in self.segments if isinstance(s, ClipRef)))

    def load(self, channels: Channels = MEAN) -> tuple[list[np.ndarray], Prompt]:
        """Read the audio (each file once, by the channel policy) and return the waveforms with the
        model-side ``Prompt`` whose clip segments index them."""
        from kvprune.models.prompting import Prompt  # kvprune.models loads transformers: only when audio is read

        files: dict[Path, list] = {}
        waves, segments = [], []
        for segment in self.segments:
            if isinstance(segment, str):
                segments.append(segment)
                continue
            if segment.path not in files:
                files[segment.path] = load_clips(segment.path, channels)
            segments.append(len(waves))
            waves.append(files[segment.path][segment.clip])
        return waves, Prompt(tuple(segments), self.system)


@dataclass(frozen=True)
class PromptSpec:
    """A task's prompt (module docstring), checked when the task file is read."""

    segments: tuple[dict, ...]
    system: str | None = None
    option_format: str = "{letter}. {text}"
    option_separator: str = "\n"

    @classmethod
    def from_config(cls, prompt, system=None, option_format=None, option_separator=None) -> PromptSpec:
        if isinstance(prompt, str):
            segments = ({"audio": ALL_CLIPS}, {"text": prompt})
        elif isinstance(prompt, list) and prompt:
            segments = tuple(_segment(s, i) for i, s in enumerate(prompt))
        else:
            raise PromptConfigError("expected a text template or a list of segments ({text: ...} or {audio: ...})")
        formats = {"option_format": option_format, "option_separator": option_separator}
        spec = cls(segments, system, **{key: value for key, value in formats.items() if value is not None})
        spec._check()
        return spec

    def _check(self) -> None:
        extra = sorted(set(_placeholders(self.option_format, "option_format")) - {"letter", "text"})
        if extra:
            raise PromptConfigError(f"option_format: bad placeholder {extra}; use {{letter}} and {{text}}")
        for s in self.segments:
            if "text" in s:
                _placeholders(s["text"], "text")
            if "label" in s and set(_placeholders(s["label"], "label")) - {"i"}:
                raise PromptConfigError(f"label {s['label']!r}: use {{i}}, the clip's number")
        if not any("audio" in s for s in self.segments):
            raise PromptConfigError("the prompt has no audio segment: add {audio: clips}")

    @property
    def named_audio(self) -> set[str]:
        return {s["audio"] for s in self.segments if "audio" in s and s["audio"] != ALL_CLIPS}

    def fields_used(self) -> set[str]:
        """The metadata fields the text templates name (beyond question, options, letters)."""
        names = {n for s in self.segments if "text" in s for n in _placeholders(s["text"], "text")}
        return names - set(FIXED_FIELDS)

    def render(self, sample: Sample, channels: Channels = MEAN) -> RenderedPrompt:
        """The sample's prompt; KeyError when a template or segment names something the item lacks."""
        options = self.option_separator.join(
            self.option_format.format(letter=letter, text=text) for letter, text in zip(LETTERS, sample.choices)
        )
        fields = {**sample.meta, "question": sample.question, "options": options,
                  "letters": letters_phrase(len(sample.choices))}
        segments: list[str | ClipRef] = []
        for segment in self.segments:
            if "text" in segment:
                segments.append(segment["text"].format_map(fields))
                continue
            name = segment["audio"]
            if name == ALL_CLIPS:
                files = list(sample.audio)
            elif name in sample.named_audio:
                files = [sample.named_audio[name]]
            else:
                raise KeyError(f"audio {name!r}")
            clips = [ClipRef(path, c) for path in files for c in range(channels.clips_per_file)]
            labelled = "label" in segment and (len(clips) > 1 or segment.get("label_single", True))
            for number, clip in enumerate(clips, start=1):
                if labelled:
                    segments.append(segment["label"].format(i=number))
                segments.append(clip)
            if channels.clips_per_file > 1 and channels.legend:
                segments.append(channels.legend)
        return RenderedPrompt(tuple(segments), self.system)


def letters_phrase(count: int) -> str:
    """'A, B, C, or D' for four options, 'A or B' for two, '' for none."""
    letters = list(LETTERS[:count])
    if count < 2:
        return "".join(letters)
    return f"{', '.join(letters[:-1])}{',' if count > 2 else ''} or {letters[-1]}"


_SEGMENT_KEYS = {"text": {"text"}, "audio": {"audio", "label", "label_single"}}


def _segment(value, index: int) -> dict:
    where = f"segment {index + 1}"
    if isinstance(value, str):
        return {"text": value}
    if not isinstance(value, dict) or len({"text", "audio"} & set(value)) != 1:
        raise PromptConfigError(f"{where}: expected {{text: template}} or {{audio: clips | <name>}}, got {value!r}")
    kind = "text" if "text" in value else "audio"
    unknown = sorted(set(value) - _SEGMENT_KEYS[kind])
    if unknown:
        raise PromptConfigError(f"{where}: unknown key(s) {unknown}; a {kind} segment takes {sorted(_SEGMENT_KEYS[kind])}")
    if not isinstance(value[kind], str) or (kind == "audio" and not value[kind]):
        raise PromptConfigError(f"{where}: {kind} must be text")
    if "label_single" in value and not isinstance(value["label_single"], bool):
        raise PromptConfigError(f"{where}: label_single must be true or false")
    if "label" in value and not isinstance(value["label"], str):
        raise PromptConfigError(f"{where}: label must be text")
    return dict(value)


def _placeholders(template: str, what: str) -> list[str]:
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise PromptConfigError(f"{what} {template!r}: {error}") from None
    if any(not name or name.isdigit() for name in names):
        raise PromptConfigError(f"{what} {template!r}: name every placeholder, as {{question}}")
    return names
