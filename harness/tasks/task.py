"""Declarative benchmark tasks, in the spirit of EleutherAI's lm-evaluation-harness.

A task is one YAML file (the built-in ones are in ``configs/``; ``include:`` lets one build on
another, see ``config_files``): where its data lives and in which native layout, the prompt, the
answer parser, the metrics (primary first) and the generation length. ``Task`` turns that into
Samples, prompts, parsed answers and scores; no task has Python of its own. A task keeps the
resolved config it was built from, which a sweep records so that its results stay readable after
the task file changes.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kvprune.registry import Registry

from .config_files import TaskConfigError, builtin_configs, is_task_file, read_task_config
from .metrics import METRICS
from .parsers import PARSERS

if TYPE_CHECKING:
    from .dataset_layouts import Layout

LETTERS = string.ascii_uppercase


@dataclass(frozen=True)
class Sample:
    """One prompt to run: its audio clips (in prompt order), question, options and gold answer."""

    id: str  # unique within the task and stable across runs: sweeps resume by it
    audio: tuple[Path, ...]
    question: str
    choices: tuple[str, ...]  # option texts in letter order A, B, ...; () for open answers (ASR)
    answer: str  # a choice letter for multiple choice, the reference text for ASR
    item: str = ""  # the underlying item when one item runs as several variants; defaults to id
    meta: dict = field(default_factory=dict, compare=False)  # e.g. scene_label, emotion_label

    def __post_init__(self):
        if not self.item:
            object.__setattr__(self, "item", self.id)


class TaskDataError(ValueError):
    """The data on disk does not fit the task: says what is wrong and which layout was expected."""


@dataclass(frozen=True)
class Task:
    """A benchmark task built from YAML; see ``load_task_file`` for the fields."""

    name: str
    title: str
    abbreviation: str
    data_dir: str  # the task's folder under --data-root
    layout: Layout  # built from the YAML's layout and layout_options
    prompt: str  # str.format template over {question}, {options}, {letters}
    parser: str
    metrics: tuple[str, ...]  # primary first
    max_new_tokens: int
    option_format: str = "{letter}. {text}"  # one line of {options}
    variants: str | None = None  # "rotate_options": one run per rotation of the options
    config: dict = field(default_factory=dict, compare=False, repr=False)  # the resolved YAML it was built from

    @property
    def primary_metric(self) -> str:
        return self.metrics[0]

    @property
    def higher_is_better(self) -> bool:
        """The direction of the primary metric (WER: lower is better)."""
        return METRICS.get(self.primary_metric).higher_is_better

    def load(self, data_root: Path | str, limit: int | None = None) -> list[Sample]:
        """The task's samples in a fixed order. ``limit`` keeps that many items, a fixed pseudo-random
        subset (seed 0) in dataset order, so short runs see every class and a larger limit keeps the
        smaller one's samples; variants of a kept item all stay."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be a positive number of items, got {limit}")
        try:
            samples = self._read(Path(data_root) / self.data_dir)
        except TaskDataError as error:
            expected = self.layout.describe(f"<data_root>/{self.data_dir}")
            raise TaskDataError(f"{self.name} ({self.abbreviation}): {error} Expected layout: {expected}") from None
        samples = _subset(samples, limit)
        if self.variants:
            samples = [variant for sample in samples for variant in VARIANTS.get(self.variants)(sample)]
        return samples

    def _read(self, task_dir: Path) -> list[Sample]:
        if not task_dir.is_dir():
            raise TaskDataError(f"data folder {task_dir} not found.")
        samples = self.layout.load(task_dir)
        if not samples:
            raise TaskDataError(f"no samples found in {task_dir}.")
        return samples

    def render(self, sample: Sample) -> str:
        """The text of the user turn; the model side adds the audio."""
        lines = [self.option_format.format(letter=letter, text=text) for letter, text in zip(LETTERS, sample.choices)]
        letters = _letters_phrase(len(sample.choices))
        return self.prompt.format(question=sample.question, options="\n".join(lines), letters=letters)

    def parse(self, output: str, sample: Sample) -> str | None:
        """The answer in a model's output (a letter or a transcript); None when there is none."""
        return PARSERS.get(self.parser)(output, sample.choices)

    def score(self, parsed: str | None, sample: Sample) -> dict[str, float]:
        """Per-sample numbers that ``summarize`` reduces (e.g. ``correct``, or WER error counts)."""
        scores: dict[str, float] = {}
        for name in self.metrics:
            scores.update(METRICS.get(name).per_sample(parsed, sample.answer))
        return scores

    def summarize(self, rows: list[dict]) -> dict[str, float]:
        """The task's metrics, primary first, on a 0-100 scale, from result rows holding ``parsed``,
        ``reference`` (the sample's answer), ``item`` and what ``score`` returned."""
        if not rows:
            raise ValueError(f"{self.name}: no results to summarize")
        return {name: METRICS.get(name).compute(rows) for name in self.metrics}


def _letters_phrase(count: int) -> str:
    """'A, B, C, or D' for four options, 'A or B' for two, '' for none."""
    letters = list(LETTERS[:count])
    if count < 2:
        return "".join(letters)
    return f"{', '.join(letters[:-1])}{',' if count > 2 else ''} or {letters[-1]}"


def _subset(samples: list[Sample], limit: int | None) -> list[Sample]:
    if limit is None or limit >= len(samples):
        return samples
    order = list(range(len(samples)))
    random.Random(0).shuffle(order)
    return [samples[i] for i in sorted(order[:limit])]


def _rotations(sample: Sample) -> list[Sample]:
    """One variant per cyclic rotation of the options (rotation r starts with option r), the gold
    letter following its option: STAR-Bench's robust protocol against letter bias."""
    if len(sample.choices) < 2:
        raise ValueError(f"sample {sample.id}: rotate_options needs a multiple-choice sample")
    count, gold = len(sample.choices), LETTERS.index(sample.answer)
    return [
        replace(
            sample, id=f"{sample.id}@rot{r}", item=sample.item, answer=LETTERS[(gold - r) % count],
            choices=sample.choices[r:] + sample.choices[:r],
        )
        for r in range(count)
    ]


VARIANTS: Registry[Callable[[Sample], list[Sample]]] = Registry("variant")
VARIANTS.register("rotate_options", _rotations)


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
    "prompt": str, "parser": str, "metrics": list, "max_new_tokens": int,
}
_OPTIONAL = {"layout_options": dict, "option_format": str, "variants": str}


def load_task_file(path: Path | str) -> Task:
    """The task in a YAML file (its ``include:`` resolved: see ``config_files``), with the fields

    - ``name`` (default: the file name), ``title``, ``abbreviation``; ``data_dir``: the task's folder
      under the data root;
    - ``layout`` (a name from ``dataset_layouts.LAYOUTS``) and ``layout_options`` (that layout's fields);
    - ``prompt``: a ``str.format`` template over ``{question}``, ``{options}`` (one ``option_format``
      line per option, default ``"{letter}. {text}"``) and ``{letters}`` (``A, B, C, or D``);
    - ``parser`` (from ``parsers.PARSERS``); ``metrics`` (from ``metrics.METRICS``, primary first);
    - ``max_new_tokens``; optional ``variants: rotate_options``.

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
            raise fail(f"expected {kind.__name__}, got {type(value).__name__} {value!r}", key)

    known = {"parser": PARSERS, "variants": VARIANTS}
    for key, registry in known.items():
        if raw.get(key) is not None and raw[key] not in registry:
            raise fail(f"unknown {raw[key]!r}; choose from {sorted(registry)}", key)
    if not raw["metrics"] or not all(isinstance(m, str) and m in METRICS for m in raw["metrics"]):
        raise fail(f"{raw['metrics']!r} must list metrics from {sorted(METRICS)}, primary first", "metrics")
    if raw["max_new_tokens"] < 1:
        raise fail("must be at least 1", "max_new_tokens")

    task = Task(
        **{k: v for k, v in raw.items() if k not in ("layout", "layout_options", "metrics")},
        layout=_build_layout(raw["layout"], raw.get("layout_options") or {}, fail),
        metrics=tuple(raw["metrics"]),
        config=raw,
    )
    _check_templates(task, fail)
    return task


def _build_layout(name: str, options: dict, fail: Callable[..., TaskConfigError]) -> Layout:
    from .dataset_layouts import LAYOUTS  # layouts build Samples, so they import this module: import lazily

    if name not in LAYOUTS:
        raise fail(f"unknown {name!r}; choose from {sorted(LAYOUTS)}", "layout")
    allowed = [f.name for f in fields(LAYOUTS.get(name))]
    try:
        return LAYOUTS.get(name)(**options)
    except (TypeError, ValueError) as error:
        raise fail(f"{error} (layout {name!r} takes {allowed})", "layout_options") from None


def _check_templates(task: Task, fail: Callable[..., TaskConfigError]) -> None:
    """Render both templates once so a bad placeholder fails at load time, not mid-sweep."""
    try:
        task.option_format.format(letter="A", text="text")
    except (KeyError, IndexError, ValueError) as error:
        raise fail(f"bad placeholder {error}; use {{letter}} and {{text}}", "option_format") from None
    try:
        task.prompt.format(question="", options="", letters="")
    except (KeyError, IndexError, ValueError) as error:
        raise fail(f"bad placeholder {error}; use {{question}}, {{options}}, {{letters}}", "prompt") from None
