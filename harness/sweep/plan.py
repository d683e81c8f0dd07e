"""What a sweep runs: the unpruned baseline and every method at every ratio (``runs_of``), on the
tasks it names (``load_tasks``; per model, ``tasks_by_model``: under a protocol with conventions per
model family, each model's tasks are its family's), and the plan of it all (``plan_sweep``): every
sample's prompt rendered once, with the identity of everything its results depend on
(``identity.SweepPlan``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial

from kvprune.press import Press

from ..audio import RESAMPLER
from ..tasks.protocols import identity_config, keep_rule
from ..tasks.suites import expand_suites
from ..tasks.task import Task, get_task
from .config import BASELINE, SweepConfig
from .identity import AudioDigests, SweepPlan, digest
from .source import Checkpoints, PlannedSample


@dataclass(frozen=True)
class PlannedRun:
    """One method at one ratio (the unpruned baseline: no method). The ratio is the run's alone: the press
    that runs it is built from the method at that ratio where it is first used (``press``)."""

    method: str  # the method's canonical label, or BASELINE
    ratio: float
    build: Callable[[float], Press] | None = field(default=None, compare=False, repr=False)  # the method at a ratio
    spec: str | None = None  # the method's full spec: every parameter of every press, layer included
    method_id: str = BASELINE  # a digest of ``spec``: what results are grouped and resumed by
    layer: int | None = None  # the layer its press acts on (None: the unpruned baseline), whatever the ratio

    @cached_property
    def press(self) -> Press | None:
        """The press at the run's ratio (None: the unpruned baseline)."""
        return None if self.build is None else self.build(self.ratio)


def runs_of(config: SweepConfig) -> list[PlannedRun]:
    """The unpruned baseline once, then every method at every ratio it takes (its own, else the sweep's;
    with the protocol's keep rule)."""
    rule = keep_rule(config.protocol)
    runs = [PlannedRun(BASELINE, 0.0)]
    for method in config.methods:
        build = partial(method.build, layer=config.layer, keep_rule=rule)
        unpruned = build(0.0)  # what the method is, apart from the sweep's ratio
        spec = repr(unpruned)
        runs += [PlannedRun(method.label, r, build, spec, digest(spec), unpruned.layer)
                 for r in method.own_ratios or config.ratios]
    return runs


def checked_presses(runs: list[PlannedRun]) -> dict[str, Press]:
    """Each method's press apart from the ratio (built at 0), by its label: what is checked against a
    model before anything runs, as a press that prunes (``check_presses(..., prunes=True)``). Nothing
    the checks find depends on the ratio but whether the press prunes, so one check per method stands
    for all its ratios, and the press at a run's ratio is built only where the run is done."""
    presses: dict[str, Press] = {}
    for run in runs:
        if run.build is not None and run.method not in presses:  # one build per method, not per ratio
            presses[run.method] = run.build(0.0)
    return presses


def load_tasks(names: list[str], protocol: str | None = None, judge: str | None = None,
               family: str | None = None) -> list[Task]:
    """The tasks of ``--tasks`` (names, suite names or YAML paths), under ``protocol`` when given, with
    the conventions it has for the model ``family`` (``Task.under``); two of one name would mix their
    results, and a task scored by a judge needs ``judge``."""
    names = expand_suites(names)
    tasks = [get_task(name) for name in names]
    tasks = [task.under(protocol, family) for task in tasks] if protocol else tasks
    seen: dict[str, str] = {}
    judged = [task.name for task in tasks if task.needs_judge]
    if judged and not judge:
        raise ValueError(f"tasks {judged} are scored by an LLM judge: run the sweep with --judge "
                         "(openai:<base URL>@<model> or hf:<folder>).")
    for name, task in zip(names, tasks):
        if task.name in seen:
            raise ValueError(
                f"tasks {seen[task.name]!r} and {name!r} are both named {task.name!r}, so their results would mix: "
                "give one of them another name (the name: field of its YAML file)."
            )
        seen[task.name] = name
    return tasks


def tasks_by_model(config: SweepConfig, source: Checkpoints | None = None) -> dict[str, list[Task]]:
    """Each model's tasks: under ``--protocol``, with the conventions the protocol has for the model's
    family, read from its checkpoint's config (the family ``load_model`` will load it as)."""
    source = source or Checkpoints()
    tasks = {}
    for name in config.models:
        family = source.family(name, config.trust_remote_code) if config.protocol else None
        tasks[name] = load_tasks(config.tasks, config.protocol, config.judge, family)
    return tasks


def plan_sweep(config: SweepConfig, tasks: dict[str, list[Task]], runs: list[PlannedRun], cache: str,
               digests: AudioDigests, source: Checkpoints | None = None) -> tuple[SweepPlan, dict[str, list[PlannedSample]]]:
    """Everything this configuration asks for, with what its results depend on, and every task's
    samples with their prompts (a sample that cannot run is identified by what is wrong with it).
    ``tasks``: each model's (``tasks_by_model``); tasks of one name are one task; ``source``: where
    models and samples come from (``source.Checkpoints``: checkpoints and --data-root)."""
    c = config
    source = source or Checkpoints()
    fingerprints = {name: source.fingerprint(name, c.trust_remote_code) for name in c.models}
    settings = dict(
        dtype=c.dtype, attn_implementation=c.attn_implementation, max_new_tokens=c.max_new_tokens,
        protocol=c.protocol, cache=cache, long_audio=c.long_audio,
        encoder=c.encoder,  # the same outputs either way, but not the same prefill times
        resampler=RESAMPLER,  # what a clip at another rate than 16 kHz becomes
        **({"no_audio": True} if c.no_audio else {}),  # only when set: folders written before stay resumable
    )
    methods = {run.method_id: dict(label=run.method, spec=run.spec, layer=run.layer) for run in runs if run.build is not None}
    unique = {task.name: task for model_tasks in tasks.values() for task in model_tasks}
    settings_ids, hashes, grades, planned = {}, {}, {}, {}
    for name, model_tasks in tasks.items():
        for task in model_tasks:
            task_settings = dict(
                settings, task=identity_config(task.config), long_audio=c.long_audio_policy(task.name),
                **({"judge": c.judge} if c.judge and (task.refine or task.needs_judge) else {}),  # what judged grading asked
                generation=dict(max_new_tokens=c.max_new_tokens or task.max_new_tokens, do_sample=False),
            )
            settings_ids.setdefault(name, {})[task.name] = digest(dict(task_settings, model=fingerprints[name]))
    for task in unique.values():
        planned[task.name] = [source.planned(task, sample, digests, c.no_audio) for sample in source.samples(task, c)]
        hashes[task.name] = {p.sample.id: p.input_hash for p in planned[task.name]}
        grades[task.name] = {p.sample.id: p.grade_hash for p in planned[task.name]}
    plan = SweepPlan(
        settings=settings, models=fingerprints, tasks={t.name: identity_config(t.config) for t in unique.values()},
        methods=methods,
        runs=[(run.method_id, run.ratio) for run in runs], settings_ids=settings_ids, samples=hashes, grades=grades,
    )
    return plan, planned

