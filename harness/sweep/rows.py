"""One line of ``results.jsonl``, typed: ``ResultRow``, which the sweep writes (``samples``; ``rescore``
grades a stored one again) and the store, the summary and the report read back.

A row is one sample under one planned run (the unpruned baseline, or a method at a ratio) in one pass
of the schedule. It holds the run's identity (``key``: what a resumed sweep skips by), the sample's
facts (its gold answer, item, metadata and place; what the model received of its audio and video:
``Received``), the grade (the output, the parsed answer, the metrics' per-sample numbers, an error),
and for a run that generated, how its call ran (``Generation``) and its times: ``SampleTiming`` when
the row's own call was timed (the timing pass, or a scoring pass that shares nothing), ``BatchTiming``
when only its batch's call was (a batched or sharing pass: throughput, not per-sample latency).

On disk a row is the JSON object it always was (``to_json``, ``from_json``), so that folders written
before read and resume: a sample's times are written as ``prefill_s``, ``decode_s``..., a batch's as
``batch_prefill_s``, ``batch_decode_s``..., and a field that has nothing to say (no pass name, no
visual tokens) is left out. A row read back writes the fields it was read with, in their order
(fields it did not have stay out), with any field set since at the end; a field this version does
not know is kept among its ``scores``. Readers that want a table take ``results_frame``: one column
per field of ``to_json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, NamedTuple

import pandas as pd

#: the JSON names of a run's identity (see ``identity``); ``pass`` tells a timing-pass row ("timing")
#: from the row that scores the same sample and run (none)
KEY_FIELDS = ("model", "task", "method", "ratio", "layer", "method_id", "sample_id", "input_hash", "settings_id", "pass")


class RunKey(NamedTuple):
    """A run's identity in one pass: what a resumed sweep finds done (``KEY_FIELDS``)."""

    model: str | None
    task: str | None
    method: str | None
    ratio: float | None  # rounded to 6 decimals
    layer: int | None
    method_id: str | None
    sample_id: str | None
    input_hash: str | None
    settings_id: str | None
    pass_name: str | None

    @classmethod
    def of(cls, *, model, task, method, ratio, layer, method_id, sample_id, input_hash, settings_id,
           pass_name=None) -> RunKey:
        return cls(model, task, method, None if ratio is None else round(ratio, 6), layer, method_id, sample_id,
                   input_hash, settings_id, pass_name)


@dataclass(frozen=True)
class Received:
    """What the model received of a sample's audio and video (its source's ``prepare``)."""

    audio_seconds: float | None  # the files' seconds (None: a length that cannot be read)
    audio_seconds_received: float | None
    audio_clips: int | None
    long_audio: str | None  # what fitting the clips to the model did (None: nothing)
    audio_tokens: int | None
    video_tokens: int | None = None  # a model that sees: its video and image tokens
    silent_videos: int | None = None  # videos that were to bring their sound tracks and had none

    @classmethod
    def of(cls, prepared: dict) -> Received:
        """From what a source's ``prepare`` returns (its ``inputs`` apart)."""
        return cls(**{name: value for name, value in prepared.items() if name != "inputs"})


@dataclass(frozen=True)
class Generation:
    """How the call that made a row ran: its batch, what was reused, which path decoded."""

    batch_size: int  # rows decoded together
    batch_id: str
    encoder_reused: bool
    layers_reused: bool
    engine: str  # kvprune's engine, transformers.generate, or the engine's fallback
    engine_note: str | None  # why the engine fell back, if it did
    graphs_captured: int
    compilations: int


@dataclass(frozen=True)
class SampleTiming:
    """The row's own call, timed: per-sample latency, memory and KV cache."""

    prefill_s: float
    decode_s: float
    new_tokens: int  # this sample's
    peak_memory_bytes: int | None  # None on CPU, where device memory is not tracked
    kv_cache_bytes: int
    kv_held_bytes: int
    cache: str
    compiled: bool  # the call compiled code: its time is not representative
    decode_tokens_per_s: float | None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BatchTiming:
    """The call of the row's batch, timed as a whole (written ``batch_prefill_s``...)."""

    prefill_s: float
    decode_s: float
    new_tokens: int  # this sample's
    batch_new_tokens: int  # the call's (its longest row's)
    cache: str
    compiled: bool

    def to_json(self) -> dict:
        return {_BATCH_JSON[f.name]: getattr(self, f.name) for f in fields(self)}


#: BatchTiming's fields under their JSON names (the call's times say ``batch_``: a sample's own are ``prefill_s``...)
_BATCH_JSON = {f.name: f"batch_{f.name}" if f.name in ("prefill_s", "decode_s") else f.name for f in fields(BatchTiming)}


#: fields written only when they say something (None, or False for ``dry_run``, is left out)
_WHEN_SET = {"started", "dry_run", "audio_input", "kept_video_tokens", "pass", "rescored", "video_tokens", "silent_videos"}
_BLOCKS = {"received": Received, "generation": Generation}
#: the sample's fields, written first (after ``started``)
_SAMPLE = ("model", "family", "task", "sample_id", "item", "input_hash", "grade_hash", "settings_id", "reference", "meta",
           "position", "warmup")


def _says_something(name: str, value) -> bool:
    return name not in _WHEN_SET or (value is not None and value is not False)


@dataclass(frozen=True)
class ResultRow:
    """One line of ``results.jsonl`` (module docstring); fields in the order they are written."""

    # the sample, as this run saw it (a line of an older version may lack any field: None)
    model: str | None = None
    family: str | None = None
    task: str | None = None
    sample_id: str | None = None
    item: str | None = None
    input_hash: str | None = None
    grade_hash: str | None = None
    settings_id: str | None = None
    reference: Any = None
    meta: dict | None = None
    position: int | None = None
    warmup: bool | None = None  # the first run of the sweep's process: its time is not counted
    # the run
    method: str | None = None
    ratio: float | None = None
    layer: int | None = None
    method_id: str | None = None
    # its grade
    output: str | None = None
    parsed: str | None = None
    scores: dict[str, Any] = field(default_factory=dict)  # the metrics' per-sample numbers (read back: unknown fields too)
    kept_tokens: int | None = None  # audio placeholders kept
    kept_video_tokens: int | None = None  # video and image placeholders kept (a model that sees)
    error: str | None = None  # "<exception type>: <message>"
    time: str | None = None
    pass_name: str | None = None  # written "pass": None for the scoring pass, "timing" for the timing pass
    # how it ran
    started: str | None = None  # the start of the sweep that wrote it
    dry_run: bool = False
    audio_input: str | None = None  # under --no-audio, what stood for the audio: "none" or "caption"
    received: Received | None = None  # None: its inputs could not be made
    generation: Generation | None = None
    timing: SampleTiming | BatchTiming | None = None
    rescored: str | None = None  # when its stored output was graded again
    _keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)  # a row read back: its fields

    @property
    def key(self) -> RunKey:
        return RunKey.of(**{name: getattr(self, name) for name in RunKey._fields})

    def to_json(self) -> dict:
        """The JSON object of ``results.jsonl``."""
        every = self._every_field()
        if self._keys is None:
            return {name: value for name, value in every.items() if _says_something(name, value)}
        written = {name: every[name] for name in self._keys if name in every}
        written.update((name, value) for name, value in every.items()
                       if name not in written and value is not None and _says_something(name, value))
        return written

    def _every_field(self) -> dict:
        """Every field under its JSON name, in the order a new row writes them."""
        sample = {name: getattr(self, name) for name in _SAMPLE}
        received = asdict(self.received) if self.received is not None else {}
        return {
            "started": self.started, **sample, "dry_run": self.dry_run, "audio_input": self.audio_input, **received,
            "method": self.method, "ratio": self.ratio, "layer": self.layer, "method_id": self.method_id,
            "output": self.output, "parsed": self.parsed, **self.scores, "kept_tokens": self.kept_tokens,
            "kept_video_tokens": self.kept_video_tokens, "error": self.error, "time": self.time, "pass": self.pass_name,
            **(asdict(self.generation) if self.generation is not None else {}),
            **(self.timing.to_json() if self.timing is not None else {}),
            "rescored": self.rescored,
        }

    @classmethod
    def from_json(cls, values: dict) -> ResultRow:
        """A row as ``results.jsonl`` holds it, written by this version or an earlier one."""
        rest = dict(values)
        simple = {f.name for f in fields(cls)} - {"scores", "pass_name", "received", "generation", "timing", "_keys"}
        found: dict[str, Any] = {name: rest.pop(name) for name in simple if name in rest}
        found["pass_name"] = rest.pop("pass", None)
        for name, block in _BLOCKS.items():
            names = [f.name for f in fields(block)]
            if any(n in rest for n in names if n not in _WHEN_SET):
                found[name] = block(**{n: rest.pop(n, None) for n in names})
        found["timing"] = _timing(rest)
        return cls(**found, scores=rest, _keys=tuple(values))


def _timing(rest: dict) -> SampleTiming | BatchTiming | None:
    """The timing fields of a row read back, taken out of ``rest``."""
    if "prefill_s" in rest:
        return SampleTiming(**{f.name: rest.pop(f.name, None) for f in fields(SampleTiming)})
    if "batch_prefill_s" in rest:
        return BatchTiming(**{name: rest.pop(written, None) for name, written in _BATCH_JSON.items()})
    return None


def results_frame(rows: list[ResultRow]) -> pd.DataFrame:
    """The rows as a table, one column per JSON field (a field some rows lack is NaN there)."""
    return pd.DataFrame([row.to_json() for row in rows])
