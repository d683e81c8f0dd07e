"""A task's prompt as ordered segments: text templates, audio clips, images and video interleaved, an
optional system turn.

In a task file, ``prompt`` is either one text template (every clip first, then the text: the usual
single-turn prompt) or a list of segments, in the order the model receives them::

    prompt:
      - {audio: clips, label: "Audio {i}:", label_single: false}   # the item's clips, labelled when several
      - {text: "{question}\\n{options}\\n"}
      - {audio: uncut}                                              # an audio file the layout names
      - {image: images}                                             # the item's images (the Omni families)
      - {video: video, frames: 16}                                  # the item's video: 16 frames, its sound track
    system: You are a helpful assistant.                            # optional system turn
    option_format: "<{letter}>: {text}"                             # one option ({letter}, {lower_letter}, {text})
    option_separator: "\\n"                                          # between options in {options}
    transcription: en                                               # instead: the family's transcription request

A text template is a ``str.format`` template over ``{question}``, ``{options}``, ``{letters}`` (``A,
B, C, or D``) and any metadata field the layout keeps for the item (``{global_caption}``).
``{audio: clips}`` is every clip of the item in order; ``{audio: <name>}`` one audio file the layout
keeps under that name (``named_audio``). A ``label`` (``{i}``: the clip's 1-based number within the
segment) goes before each clip, and before a lone clip only if ``label_single`` (default true). A file
that the task's channel policy turns into several clips (``split``, ``foa_stereo``) contributes each
of them, then the policy's legend text. ``{image: images}`` is every image of the item;
``{video: video}`` its video, sampled as ``harness.video`` says (``frames: n``, or ``fps: r``, default
2 per second), with its sound track interleaved as the Omni models take it (``sound: track``, the
default, when the file has one; ``sound: none`` for the frames alone). A segment whose media the item
lacks adds nothing. A prompt with ``transcription`` (a language code) is one ``{audio: clips}`` segment
and nothing else: the model family's transcription request for the clip (Voxtral's), not a chat turn.

Prompts without audio (``render(..., no_audio=True)``, the sweep's ``--no-audio``), for ablations:
the audio segments are left out, videos keep their frames without their sound, and a task with a
``caption`` (``{field: <metadata field>, template: "...{caption}..."}``) puts the item's caption, when
it has one, where its first audio segment stood (a caption-only baseline).
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..audio import load_clips
from ..channels import MEAN, Channels
from ..video import FPS, read_image, read_sound, read_video

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
class ImageRef:
    """An image file of a rendered prompt."""

    path: Path


@dataclass(frozen=True)
class VideoRef:
    """A video file of a rendered prompt: ``frames`` frames (or ``fps`` per second), with its sound track."""

    path: Path
    frames: int | None = None
    fps: float = FPS
    sound: bool = True


MediaRef = ClipRef | ImageRef | VideoRef


@dataclass(frozen=True)
class RenderedPrompt:
    """What one sample's prompt holds, before any media is read: text and media references in order."""

    segments: tuple[str | MediaRef, ...]
    system: str | None = None
    transcription: str | None = None  # a language: the family's transcription request for the one clip
    captioned: bool = False  # rendered without its audio, the task's caption standing in its place

    @property
    def text(self) -> str:
        """The prompt as text for hashing and display: the text alone when the prompt is the usual
        shape (every clip, then one text, no system turn), else JSON of the segments."""
        *clips, last = self.segments or ("",)
        usual = self.system is None and self.transcription is None
        if usual and isinstance(last, str) and all(isinstance(c, ClipRef) for c in clips):
            return last
        shown = [s if isinstance(s, str) else _shown(s) for s in self.segments]
        request = {"transcription": self.transcription} if self.transcription else {}
        return json.dumps({"system": self.system, "segments": shown, **request}, ensure_ascii=False)

    @property
    def files(self) -> tuple[Path, ...]:
        """The media files the prompt reads, each once, in order of first use."""
        return tuple(dict.fromkeys(s.path for s in self.segments if not isinstance(s, str)))

    def load(self, channels: Channels = MEAN) -> tuple[list[np.ndarray], Prompt]:
        """Read the media (each audio file once, by the channel policy) and return the waveforms with
        the model-side ``Prompt`` whose clip segments (and videos' sound tracks) index them."""
        from kvprune.models.prompting import Image, Prompt, Video  # loads transformers: only when media are read

        files: dict[Path, list] = {}
        waves, segments = [], []
        for segment in self.segments:
            if isinstance(segment, str):
                segments.append(segment)
            elif isinstance(segment, ImageRef):
                segments.append(Image(read_image(segment.path)))
            elif isinstance(segment, VideoRef):
                frames, fps = read_video(segment.path, segment.frames, segment.fps)
                sound = read_sound(segment.path) if segment.sound else None
                if sound is not None:
                    waves.append(sound)
                segments.append(Video(frames, fps, None if sound is None else len(waves) - 1))
            else:
                if segment.path not in files:
                    files[segment.path] = load_clips(segment.path, channels)
                segments.append(len(waves))
                waves.append(files[segment.path][segment.clip])
        return waves, Prompt(tuple(segments), self.system, self.transcription)


    def silent_videos(self, prompt: Prompt) -> int | None:
        """Of the videos this prompt shows with their sound track, how many had none once ``load`` read
        them into ``prompt`` (such a file goes in silent: a result row records it); None when no video
        was to bring its sound."""
        wanted = [model for ref, model in zip(self.segments, prompt.segments) if isinstance(ref, VideoRef) and ref.sound]
        return sum(video.audio is None for video in wanted) if wanted else None


def _shown(ref: MediaRef) -> list:
    """A media reference as the prompt's text shows it (and hashes it): the file name and its settings."""
    if isinstance(ref, ClipRef):
        return [ref.path.name, ref.clip]
    if isinstance(ref, ImageRef):
        return [ref.path.name, "image"]
    return [ref.path.name, "video", ref.frames if ref.frames is not None else f"{ref.fps:g} fps", "sound" if ref.sound else "silent"]


@dataclass(frozen=True)
class PromptSpec:
    """A task's prompt (module docstring), checked when the task file is read."""

    segments: tuple[dict, ...]
    system: str | None = None
    option_format: str = "{letter}. {text}"
    option_separator: str = "\n"
    caption: dict | None = None  # {field, template}: what stands for the audio in a prompt without it
    transcription: str | None = None  # a language: the family's transcription request, not a chat turn

    @classmethod
    def from_config(cls, prompt, system=None, option_format=None, option_separator=None, caption=None,
                    transcription=None) -> PromptSpec:
        if isinstance(prompt, str):
            segments = ({"audio": ALL_CLIPS}, {"text": prompt})
        elif isinstance(prompt, list) and prompt:
            segments = tuple(_segment(s, i) for i, s in enumerate(prompt))
        else:
            raise PromptConfigError("expected a text template or a list of segments ({text: ...} or {audio: ...})")
        formats = {"option_format": option_format, "option_separator": option_separator, "caption": caption,
                   "transcription": transcription}
        spec = cls(segments, system, **{key: value for key, value in formats.items() if value is not None})
        spec._check()
        return spec

    def _check(self) -> None:
        if self.caption is not None:
            if not isinstance(self.caption, dict) or set(self.caption) != {"field", "template"}:
                raise PromptConfigError("caption: expected {field: <metadata field>, template: \"...{caption}...\"}")
            if set(_placeholders(self.caption["template"], "caption template")) != {"caption"}:
                raise PromptConfigError("caption: the template must name {caption} and nothing else")
        extra = sorted(set(_placeholders(self.option_format, "option_format")) - {"letter", "lower_letter", "text"})
        if extra:
            raise PromptConfigError(f"option_format: bad placeholder {extra}; use {{letter}} (or {{lower_letter}}) and {{text}}")
        if self.transcription is not None and (self.system is not None or self.segments != ({"audio": ALL_CLIPS},)):
            raise PromptConfigError("transcription: the prompt must be [{audio: clips}] alone, with no system turn")
        for s in self.segments:
            if "text" in s:
                _placeholders(s["text"], "text")
            if "label" in s and set(_placeholders(s["label"], "label")) - {"i"}:
                raise PromptConfigError(f"label {s['label']!r}: use {{i}}, the clip's number")
        if not any(MEDIA_KEYS & set(s) for s in self.segments):
            raise PromptConfigError("the prompt has no audio, image or video segment: add {audio: clips}")

    @property
    def named_audio(self) -> set[str]:
        return {s["audio"] for s in self.segments if "audio" in s and s["audio"] != ALL_CLIPS}

    def fields_used(self) -> set[str]:
        """The metadata fields the text templates name (beyond question, options, letters)."""
        names = {n for s in self.segments if "text" in s for n in _placeholders(s["text"], "text")}
        return (names | ({self.caption["field"]} if self.caption else set())) - set(FIXED_FIELDS)

    def render(self, sample: Sample, channels: Channels = MEAN, no_audio: bool = False) -> RenderedPrompt:
        """The sample's prompt (``no_audio``: without its audio, module docstring); KeyError when a
        template or segment names something the item lacks."""
        options = self.option_separator.join(
            self.option_format.format(letter=letter, lower_letter=letter.lower(), text=text)
            for letter, text in zip(LETTERS, sample.choices)
        )
        fields = {**sample.meta, "question": sample.question, "options": options,
                  "letters": letters_phrase(len(sample.choices))}
        segments: list[str | MediaRef] = []
        caption = self._caption(sample) if no_audio else None
        captioned = False
        for segment in self.segments:
            if "text" in segment:
                segments.append(segment["text"].format_map(fields))
                continue
            if no_audio and "audio" in segment:
                segments += [caption] if caption else []
                captioned, caption = captioned or bool(caption), None  # once, where the first audio stood
                continue
            if "image" in segment:
                segments += [ImageRef(path) for path in sample.images]
                continue
            if "video" in segment:
                if sample.video is not None:
                    segments.append(VideoRef(sample.video, segment.get("frames"), segment.get("fps", FPS),
                                             segment.get("sound", "track") == "track" and not no_audio))
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
        return RenderedPrompt(tuple(segments), self.system, self.transcription, captioned)


    def _caption(self, sample: Sample) -> str | None:
        """The text that stands for the item's audio in a prompt without it: its caption, if any."""
        if self.caption is None or sample.meta.get(self.caption["field"]) in (None, ""):
            return None
        return self.caption["template"].format(caption=sample.meta[self.caption["field"]])


def letters_phrase(count: int) -> str:
    """'A, B, C, or D' for four options, 'A or B' for two, '' for none."""
    letters = list(LETTERS[:count])
    if count < 2:
        return "".join(letters)
    return f"{', '.join(letters[:-1])}{',' if count > 2 else ''} or {letters[-1]}"


_SEGMENT_KEYS = {"text": {"text"}, "audio": {"audio", "label", "label_single"}, "image": {"image"},
                 "video": {"video", "frames", "fps", "sound"}}
MEDIA_KEYS = {"audio", "image", "video"}
#: what an image or video segment names: the item's images, its video
_MEDIA_VALUES = {"image": "images", "video": "video"}


def _segment(value, index: int) -> dict:
    where = f"segment {index + 1}"
    if isinstance(value, str):
        return {"text": value}
    if not isinstance(value, dict) or len(set(_SEGMENT_KEYS) & set(value)) != 1:
        raise PromptConfigError(f"{where}: expected {{text: template}}, {{audio: clips | <name>}}, {{image: images}} "
                                f"or {{video: video}}, got {value!r}")
    kind = next(k for k in _SEGMENT_KEYS if k in value)
    if kind in _MEDIA_VALUES:
        _check_media(value, kind, where)
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


def _check_media(value: dict, kind: str, where: str) -> None:
    if value[kind] != _MEDIA_VALUES[kind]:
        raise PromptConfigError(f"{where}: {kind} must be {_MEDIA_VALUES[kind]!r} (the item's), not {value[kind]!r}")
    frames, fps = value.get("frames"), value.get("fps")
    if frames is not None and fps is not None:
        raise PromptConfigError(f"{where}: give frames or fps, not both")
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int) or frames < 2):
        raise PromptConfigError(f"{where}: frames must be a whole number of at least 2")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or fps <= 0):
        raise PromptConfigError(f"{where}: fps must be a positive number")
    if value.get("sound", "track") not in ("track", "none"):
        raise PromptConfigError(f"{where}: sound must be track (the video's own sound track) or none")


def _placeholders(template: str, what: str) -> list[str]:
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise PromptConfigError(f"{what} {template!r}: {error}") from None
    if any(not name or name.isdigit() for name in names):
        raise PromptConfigError(f"{what} {template!r}: name every placeholder, as {{question}}")
    return names
