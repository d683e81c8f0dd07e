"""One sample under every run it still needs, on a loaded model.

The sample's audio is read by the task's channel policy and fitted to what the model takes (the
task's long-audio policy: ``harness.long_audio``) once; then the unpruned baseline and every method x
ratio run on the same inputs, back to back, each one ``generate`` call on the sweep's cache, timed by
``timing.timed_generate``. The task grades each output, and the row is appended immediately. A failure
(unreadable audio, out of memory, a bug in one press, a parser that fails on one output) becomes that
run's error row and the sweep goes on.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict

from kvprune.models.loading import LoadedModel
from kvprune.press import Press

from ..long_audio import model_inputs
from ..setup.device import release_memory
from ..setup.environment import now
from ..tasks.task import Task, TaskDataError
from ..timing import timed_generate
from .config import SweepConfig
from .plan import PlannedRun, PlannedSample
from .store import ResultStore


class SampleRunner:
    """Runs the planned runs of one sample after another and appends one row per run to ``store``."""

    def __init__(self, config: SweepConfig, cache: str, store: ResultStore, judge=None):
        self.config, self.cache, self.store = config, cache, store
        self.judge = judge  # for the judged steps of grading (refine, judged metrics): harness.judge

    def run(self, loaded: LoadedModel, task: Task, planned: PlannedSample, settings_id: str,
            todo: list[PlannedRun], warmup: bool, bar) -> None:
        sample = planned.sample
        base = dict(
            model=loaded.name, family=loaded.family.name, task=task.name, sample_id=sample.id,
            item=sample.item, input_hash=planned.input_hash, settings_id=settings_id,
            reference=sample.answer, meta=sample.meta, position=sample.position, warmup=warmup,
        )
        try:
            if sample.problem:
                raise TaskDataError(sample.problem)
            base.update(self._prepare(loaded, task, planned))
            inputs = base.pop("inputs")
        except Exception as error:  # one bad sample must not stop the sweep
            for run in todo:
                self._append(task, planned, base, run, error=error)
                bar.update()
            return
        for run in todo:
            try:
                outcome = self._generate(loaded, task, inputs, run.press)
            except Exception as error:
                release_memory()
                outcome = dict(error=error)
            self._append(task, planned, base, run, **outcome)
            bar.update()

    def _prepare(self, loaded: LoadedModel, task: Task, planned: PlannedSample) -> dict:
        """The model inputs of a sample, its audio read by the task's channel policy and fitted to
        what the model takes (the task's long-audio policy), with how much audio the model received."""
        waves, model_prompt = planned.prompt.load(task.channels)
        return model_inputs(loaded, waves, model_prompt, self.config.long_audio_policy(task.name))

    def _generate(self, loaded: LoadedModel, task: Task, inputs: dict, press: Press | None) -> dict:
        tokenizer = getattr(loaded.processor, "tokenizer", loaded.processor)
        generate_kwargs = dict(
            max_new_tokens=self.config.max_new_tokens or task.max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        )
        if self.cache == "static":
            generate_kwargs["cache_implementation"] = "static"  # generate compiles the decode step on a GPU
        with press(loaded.model) if press else nullcontext() as pressed:
            new_ids, timing = timed_generate(loaded.generator, inputs, **generate_kwargs)
        kept = sum(s.kept_tokens for s in pressed.stats) if pressed is not None else None
        return dict(output=loaded.decode(new_ids), timing=timing, kept_tokens=kept)

    def _append(self, task: Task, planned: PlannedSample, base: dict, run: PlannedRun, output=None, timing=None,
                kept_tokens=None, error=None) -> None:
        grade = task.grade(output, planned.sample, self.judge)
        error = error or grade.error
        row = dict(
            base,
            method=run.method,
            ratio=run.ratio,
            layer=run.layer,
            method_id=run.method_id,
            output=output,
            parsed=grade.parsed,
            **grade.scores,
            kept_tokens=kept_tokens if kept_tokens is not None else base.get("audio_tokens"),
            error=None if error is None else f"{type(error).__name__}: {error}",
            time=now(),
        )
        if timing is not None:
            row.update(asdict(timing), decode_tokens_per_s=timing.decode_tokens_per_s)
        self.store.append(row)
