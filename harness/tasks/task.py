"""Declarative benchmark tasks, in the spirit of EleutherAI's lm-evaluation-harness.

A task is one YAML file (the built-in ones are in their benchmarks' folders, ``benchmarks/<name>/``;
``include:`` lets one build on another, see ``config_files``): where its data lives and in which layout, the prompt (``prompts``),
how the audio's channels become clips (``channels``), protocol variants (``variants``), the answer
parser, the metrics (primary first) and the generation length. ``Task`` turns that into Samples,
prompts, parsed answers and scores; no task has Python of its own. A task keeps the resolved config
it was built from, which a sweep records so that its results stay readable after the task file
changes. ``load_task_file`` lists the fields.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvprune.registry import Registry

from ..channels import MEAN, Channels
from ..scoring.durations import DurationBuckets, task_buckets
from . import task_fields
from .benchmark import builtin_configs
from .config_files import TaskConfigError, is_task_file, read_task_config
from .dataset_layouts import Layout
from .judged import REFINERS
from .metrics import METRICS, Metric
from .parsers import PARSERS
from .prompts import PromptSpec, RenderedPrompt
from .protocols import OFFICIAL, PROTOCOLS, family_problem, resolved_config
from .sample import Grade, Sample, TaskDataError  # noqa: F401 (re-exported)
from .variants import Variant

DATA_LAYOUTS = ("official", "provisional", "synthetic")


@dataclass(frozen=True)
class Task:
    """A benchmark task built from YAML; see ``load_task_file`` for the fields."""

    name: str
    title: str
    abbreviation: str
    data_dir: str  # the task's folder under --data-root
    layout: Layout  # built from the YAML's layout and layout_options
    prompt: PromptSpec
    parser: str
    metrics: tuple[str, ...]  # primary first
    max_new_tokens: int
    channels: Channels = MEAN
    variant: Variant | None = None  # one item -> several runs ("<id>@<r>")
    metric_options: dict = field(default_factory=dict)
    breakdown_by: tuple[str, ...] = ()
    #: field -> the field whose groups count whole under their first row's value of it (breakdowns)
    breakdown_whole: dict = field(default_factory=dict)
    benchmark: str = ""
    data_layout: str = "official"  # whether the data layout is the benchmark's published one
    protocol: str = OFFICIAL  # the protocol this config follows
    protocols: dict = field(default_factory=dict, repr=False)  # other protocols: name -> the fields they change
    notes: str = ""  # what a reader of the results must know (shown in report.md)
    refine: str | None = None  # a judge's rewrite of each reply before it is parsed (REFINERS), when there is a judge
    failed_reply: str | None = None  # what a failed run is scored as ({error}: its message); None: no answer
    config: dict = field(default_factory=dict, compare=False, repr=False)  # the resolved YAML it was built from

    @property
    def primary_metric(self) -> str:
        return self.metrics[0]

    @property
    def needs_judge(self) -> bool:
        """Whether a metric of the task is judged (the sweep then needs --judge)."""
        return any(METRICS.get(name).judged for name in self.metrics)

    @property
    def duration_buckets(self) -> DurationBuckets:
        """The buckets its score against audio duration uses: its benchmark's for it (``scoring.durations``:
        AudioMarathon's scripts', by benchmark and abbreviation, so that results recorded before keep
        theirs), analyse_all's for any other task."""
        return task_buckets(self.benchmark, self.abbreviation)

    @property
    def higher_is_better(self) -> bool:
        """The direction of the primary metric (WER: lower is better)."""
        return METRICS.get(self.primary_metric).higher_is_better

    def load(self, data_root: Path | str, limit: int | None = None, strict: bool = True) -> list[Sample]:
        """The task's samples in a fixed order. ``limit`` keeps that many items, a fixed pseudo-random
        subset (seed 0) in dataset order, so short runs see every class and a larger limit keeps the
        smaller one's samples; variants of a kept item all stay. An item that cannot run (missing
        audio, a malformed record, a prompt field it lacks) raises TaskDataError, or with
        ``strict=False`` stays as a sample with a ``problem`` (a sweep records it and goes on)."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be a positive number of items, got {limit}")
        expected = f" Expected layout: {self.layout.describe(f'<data_root>/{self.data_dir}')}"
        try:
            samples = self._read(Path(data_root) / self.data_dir)
        except TaskDataError as error:
            raise TaskDataError(f"{self.name} ({self.abbreviation}): {error}{expected}") from None
        samples = [run for sample in _subset(samples, limit) for run in self._runs(sample)]
        samples = [replace(self._checked(s), position=i) for i, s in enumerate(samples)]
        samples = [replace(s, problem=f"{self.name} ({self.abbreviation}): {s.problem}{expected}") if s.problem else s
                   for s in samples]
        broken = [s for s in samples if s.problem]
        if strict and broken:
            raise TaskDataError(broken[0].problem)
        return samples

    def _read(self, task_dir: Path) -> list[Sample]:
        if not task_dir.is_dir():
            raise TaskDataError(f"data folder {task_dir} not found.")
        samples = self.layout.load(task_dir)
        if not samples:
            raise TaskDataError(f"no samples found in {task_dir}.")
        return samples

    def _runs(self, sample: Sample) -> list[Sample]:
        if self.variant is None or sample.problem:
            return [sample]
        try:
            return self.variant(sample)
        except TaskDataError as error:
            return [replace(sample, problem=str(error))]

    def _checked(self, sample: Sample) -> Sample:
        """The sample, or the sample with a problem when its prompt cannot be rendered."""
        if sample.problem:
            return sample
        try:
            self.render(sample)
        except KeyError as error:
            return replace(sample, problem=(
                f"sample {sample.id}: the prompt names {error}, which this item does not have: add the field to the "
                "item, or to the layout's meta_fields (named_audio for an audio segment)."
            ))
        return sample

    def render(self, sample: Sample, no_audio: bool = False) -> RenderedPrompt:
        """The sample's prompt: ordered text and media references, and the system turn; ``no_audio``:
        without its audio (its caption instead, if the task has one: ``prompts``)."""
        return self.prompt.render(sample, self.channels, no_audio)

    def parse(self, output: str, sample: Sample) -> str | None:
        """The answer in a model's output (a letter, a transcript, the reply itself); None when there is none."""
        return PARSERS.get(self.parser)(output, sample.choices)

    def score(self, parsed: str | None, sample: Sample, judge=None) -> dict[str, float]:
        """Per-sample numbers that ``summarize`` reduces (e.g. ``correct``, or WER error counts);
        judged metrics get ``judge``."""
        scores: dict[str, float] = {}
        for name in self.metrics:
            metric = METRICS.get(name)
            judged = {"judge": judge} if metric.judged else {}
            scores.update(metric.per_sample(parsed, sample, **judged, **self._options(metric)))
        return scores

    def grade(self, output: str | None, sample: Sample, judge=None, failure: str | None = None) -> Grade:
        """Parse and score one output (None: the run failed, with ``failure`` its error's message, which
        scores as no answer, or as ``failed_reply`` with the message in it: STAR-Bench's official loop
        scores ``"ERROR: <exception>"``); with a ``judge``, the task's refine step rewrites the output
        first (``tasks.judged``). A parser, metric or judge that fails on this output is that sample's
        error (``Grade.error``), not the sweep's."""
        if output is None and failure is not None and self.failed_reply is not None:
            output = self.failed_reply.format(error=failure)
        parsed, error = None, None
        if output is not None:
            try:
                reply = REFINERS.get(self.refine)(judge, sample, output) if judge and self.refine else output
                parsed = None if reply is None else self.parse(reply, sample)
            except Exception as parse_error:
                error = parse_error
        try:
            scores = self.score(parsed, sample, judge)
        except Exception as score_error:
            error, scores = error or score_error, {}
        return Grade(parsed, scores, error)

    def summarize(self, rows: list[dict]) -> dict[str, float]:
        """The task's metrics, primary first, from result rows holding ``parsed``, ``reference`` (the
        sample's answer), ``item``, ``meta``, ``position`` and what ``score`` returned. Rows are taken
        in the task's sample order (metrics that pair items by order need it)."""
        if not rows:
            raise ValueError(f"{self.name}: no results to summarize")
        if all(_number(r.get("position")) for r in rows):
            rows = sorted(rows, key=lambda r: r["position"])
        return {name: METRICS.get(name).compute(rows, **self._options(METRICS.get(name))) for name in self.metrics}

    def _options(self, metric: Metric) -> dict:
        return {key: self.metric_options[key] for key in metric.options}

    def under(self, protocol: str, family: str | None = None) -> Task:
        """This task under another protocol (``protocols``), with the conventions the protocol has for
        the model ``family``, if any (``protocols.resolved_config``: named ``<name>@<protocol>``, or
        ``<name>@<protocol>:<family>``)."""
        if protocol == self.protocol:
            return self
        if protocol not in self.protocols:
            have = ", ".join([self.protocol, *self.protocols])
            raise TaskConfigError(f"task {self.name} has no {protocol!r} protocol (it has: {have})")
        where = f"task {self.name}, protocol {protocol}" + (f", family {family}" if family else "")
        return task_from_config(resolved_config(self.config, protocol, family), source=where)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _subset(samples: list[Sample], limit: int | None) -> list[Sample]:
    if limit is None or limit >= len(samples):
        return samples
    order = list(range(len(samples)))
    random.Random(0).shuffle(order)
    return [samples[i] for i in sorted(order[:limit])]


# -- the registry and YAML ---------------------------------------------------------------------------

TASKS: Registry[Path] = Registry("task")  # name -> the task's YAML file


def _register_builtin_tasks() -> None:
    """Every built-in config but the bases that exist only to be included (``_...``)."""
    for name, path in builtin_configs().items():
        if not name.startswith("_"):
            TASKS.register(name, path)


_register_builtin_tasks()


def list_tasks() -> list[str]:
    """Names of the registered tasks (the built-in ones, and any registered since)."""
    return TASKS.names()


def get_task(name: str) -> Task:
    """A registered task by name, or the task in a YAML file (a path ending in .yaml or .yml)."""
    if is_task_file(name):
        return load_task_file(name)
    if name not in TASKS:
        raise ValueError(
            f"unknown task {name!r}; the tasks are: {', '.join(TASKS)}; or give a task YAML file (a path ending in .yaml)"
        )
    return load_task_file(TASKS.get(name))


_REQUIRED = {
    "name": str, "title": str, "abbreviation": str, "data_dir": str, "layout": str,
    "prompt": (str, list), "parser": str, "metrics": list, "max_new_tokens": int,
}
_OPTIONAL = {
    "layout_options": dict, "option_format": str, "option_separator": str, "system": str, "channels": (str, dict),
    "variants": (str, dict), "metric_options": dict, "breakdown_by": list, "benchmark": str, "data_layout": str,
    "protocol": str, "protocols": dict, "notes": str, "refine": str, "caption": dict, "family": str,
    "transcription": str, "failed_reply": str, "breakdown_whole": dict,
}


def load_task_file(path: Path | str) -> Task:
    """The task in a YAML file (its ``include:`` resolved: see ``config_files``), with the fields

    - ``name`` (default: the file name), ``title``, ``abbreviation``; ``data_dir``: the task's folder
      under the data root; ``benchmark``: the benchmark it belongs to; ``data_layout``: ``official``
      (the benchmark's published layout), ``provisional`` (ours, until one is published) or
      ``synthetic``; ``notes``: what a reader of its results must know (shown in report.md; a task with
      a ``refine`` step notes what scoring without the judge means, and the report of a sweep with
      ``--judge`` says instead that the judge ran it);
    - ``layout`` (a name from ``dataset_layouts.LAYOUTS``) and ``layout_options`` (that layout's fields);
    - ``prompt``: a template or ordered segments, with ``system``, ``option_format``, ``option_separator``,
      ``caption`` (what stands for the audio in a prompt without it) and ``transcription`` (the model's
      transcription request instead of a chat turn; see ``prompts``); ``channels``:
      the channel policy (see ``kvprune.harness.channels``);
    - ``variants``: a name from ``variants.VARIANTS``, or ``{name: ..., <options>}``;
    - ``parser`` (from ``parsers.PARSERS``); ``metrics`` (from ``metrics.METRICS``, primary first);
      ``metric_options``: options the metrics take (e.g. ``starbench_part``); ``breakdown_by``:
      metadata fields to score per value (``breakdown.csv``); ``breakdown_whole``: ``{field: group}``,
      a ``group`` value's rows all count under the ``field`` value of its first row (STAR-Bench
      perception: a sub-category under its first row's category, as the official table counts it);
    - ``max_new_tokens``; ``protocol``: the protocol it follows (default ``official``) and
      ``protocols``: other protocols by name, each the fields it changes, and per model family the
      fields that family's conventions change on top (``families``; ``Task.under``); ``family``: in a
      resolved config, the model family whose conventions it follows;
    - ``refine``: a judge's rewrite of each reply before parsing, when the sweep has one (``judged.REFINERS``);
      ``failed_reply``: the reply a failed run is scored as (``{error}``: its message; STAR-Bench's).

    Raises TaskConfigError naming the file and the field when anything is off.
    """
    return task_from_config(read_task_config(path), source=str(path))


def task_from_config(config: dict, source: str) -> Task:
    """The task of a resolved config (as ``load_task_file`` reads it, or as a sweep recorded it);
    errors name ``source``."""

    def fail(problem: str, key: str | None = None) -> TaskConfigError:
        return TaskConfigError(f"{source}: {f'field {key!r}: ' if key else ''}{problem}")

    raw = dict(config)
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise fail(f"unknown field(s) {unknown}; the fields are {sorted(_REQUIRED) + sorted(_OPTIONAL)}")
    for key in _REQUIRED:
        if raw.get(key) is None:
            raise fail("missing", key)
    for key, kind in {**_REQUIRED, **_OPTIONAL}.items():
        value = raw.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise fail(f"expected {names}, got {type(value).__name__} {value!r}", key)
    if raw["parser"] not in PARSERS:
        raise fail(f"unknown {raw['parser']!r}; choose from {sorted(PARSERS)}", "parser")
    if not raw["metrics"] or not all(isinstance(m, str) and m in METRICS for m in raw["metrics"]):
        raise fail(f"{raw['metrics']!r} must list metrics from {sorted(METRICS)}, primary first", "metrics")
    if raw["max_new_tokens"] < 1:
        raise fail("must be at least 1", "max_new_tokens")
    if raw.get("refine") is not None and raw["refine"] not in REFINERS:
        raise fail(f"unknown {raw['refine']!r}; choose from {sorted(REFINERS)}", "refine")
    if raw.get("data_layout", "official") not in DATA_LAYOUTS:
        raise fail(f"choose one of {DATA_LAYOUTS}", "data_layout")
    protocol = raw.get("protocol", OFFICIAL)
    for name in [protocol, *raw.get("protocols", {})]:
        if name not in PROTOCOLS:
            raise fail(f"unknown protocol {name!r}; the protocols are {sorted(PROTOCOLS)}", "protocols")
    if problem := family_problem(raw.get("protocols", {})):
        raise fail(problem, "protocols")
    metrics = tuple(raw["metrics"])
    layout = task_fields.build_layout(raw["layout"], raw.get("layout_options") or {}, fail)
    task = Task(
        name=raw["name"], title=raw["title"], abbreviation=raw["abbreviation"], data_dir=raw["data_dir"],
        layout=layout, prompt=task_fields.build_prompt(raw, fail), parser=raw["parser"], metrics=metrics,
        max_new_tokens=raw["max_new_tokens"], channels=task_fields.build_channels(raw.get("channels"), fail),
        variant=task_fields.build_variant(raw.get("variants"), fail), metric_options=task_fields.metric_options(raw, metrics, fail),
        breakdown_by=task_fields.breakdown(raw.get("breakdown_by") or [], fail),
        breakdown_whole=dict(raw.get("breakdown_whole") or {}), benchmark=raw.get("benchmark", ""),
        data_layout=raw.get("data_layout", "official"), protocol=protocol, protocols=raw.get("protocols", {}),
        notes=raw.get("notes", ""), refine=raw.get("refine"), failed_reply=raw.get("failed_reply"), config=raw,
    )
    task_fields.check_fields(task, fail)
    return task
