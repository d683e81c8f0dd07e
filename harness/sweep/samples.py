"""A batch of samples under every run they still need, on a loaded model.

Each sample's audio is read by the task's channel policy and fitted to what the model takes (the
task's long-audio policy: ``harness.long_audio``) once; then the unpruned baseline and every method x
ratio run on the batch, back to back (``execute.Executor``: samples prefilled one by one, decoded
together). While a batch runs, its samples' audio encoder outputs are computed once and reused by
every later run (``kvprune.generation.reuse_audio_encoder``: exact, the same tensors), and the
embedding and decoder layers < K of the token presses at one K once per sample
(``kvprune.generation.share_layers_below``: exact too), unless the batch is a timing pass, which
measures each sample's own request. The task grades each output, and
its row is appended as soon as the run's call returns. A failure (unreadable audio, out of memory, a
bug in one press, a parser that fails on one output) becomes that run's error row and the sweep goes
on; a batch whose call fails is retried one sample at a time, so that one bad sample costs only its
own row.

Rows (``rows.ResultRow``) say how they were made (``Generation``: rows decoded together, the batch's
id, what was reused); a timed pass's rows carry their own prefill and decode times (``SampleTiming``),
a batched or sharing pass's the batch's (``BatchTiming``), which give throughput, not per-sample latency.
"""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from dataclasses import replace

from kvprune.generation.encoder_reuse import EncoderReuse, reuse_audio_encoder
from kvprune.generation.layer_reuse import LayerReuse, share_layers_below
from kvprune.models.loading import LoadedModel

from ..setup.device import release_memory
from ..setup.environment import now
from ..tasks.task import Task, TaskDataError
from .config import SweepConfig
from .execute import BatchGeneration, Executor, SampleOutput
from .plan import PlannedRun, PlannedSample
from .rows import BatchTiming, Generation, Received, ResultRow, SampleTiming
from .schedule import Pass, Work
from .source import VISUAL, Checkpoints
from .store import ResultStore


def kept_counts(received: Received | None, kept: dict[str, int] | None) -> tuple[int | None, int | None]:
    """A row's kept tokens, audio and visual apart: audio, and for a model that sees, video frames and
    images (None for a model that does not); a modality outside the press's scope (or a run without a
    press, or one that failed) kept all of its tokens."""
    kept = kept or {}
    audio = kept.get("audio", received.audio_tokens if received else None)
    if received is None or received.video_tokens is None:
        return audio, None
    visual = [kept[modality] for modality in VISUAL if modality in kept]
    return audio, sum(visual) if visual else received.video_tokens


class SampleRunner:
    """Runs the planned runs of a batch of samples, one run after another, and appends one row per
    sample and run to ``store``."""

    def __init__(self, config: SweepConfig, store: ResultStore, executor: Executor, judge=None,
                 source: Checkpoints | None = None):
        self.config, self.store, self.executor = config, store, executor
        self.reuse = EncoderReuse()
        self.layers = LayerReuse()
        self.judge = judge  # for the judged steps of grading (refine, judged metrics): harness.judge
        self.source = source or Checkpoints()  # how a sample's inputs are made, and how long its answer is

    def run_batch(self, loaded: LoadedModel, task: Task, batch: list[Work], *, settings_id: str, runs: list[PlannedRun],
            warmup: bool, bar, how: Pass) -> None:
        prepared = []
        for planned, todo in batch:
            base = self._base(loaded, task, planned, settings_id, warmup)
            try:
                if planned.sample.problem:
                    raise TaskDataError(planned.sample.problem)
                made = self.source.prepare(loaded, task, planned, self.config.long_audio_policy(task.name))
                prepared.append((planned, todo, replace(base, received=Received.of(made)), made["inputs"]))
            except Exception as error:  # one bad sample must not stop the sweep
                for run in todo:
                    self._append(task, planned, base, run, how, error=error)
                    bar.update()
        reuse = reuse_audio_encoder(loaded.model, self.reuse) if how.reuse_encoder and prepared else nullcontext()
        try:
            with reuse:
                for run in runs:
                    members = [(planned, base, inputs) for planned, todo, base, inputs in prepared if run in todo]
                    if members:
                        shared = share_layers_below(loaded.model, run.press, self.layers) if how.share_layers else nullcontext()
                        with shared:
                            self._generate(task, run, members, how, bar)
        finally:
            self.reuse.clear()
            self.layers.clear()

    def _generate(self, task: Task, run: PlannedRun, members: list, how: Pass, bar) -> None:
        max_new_tokens = self.config.max_new_tokens or task.max_new_tokens
        answers = [self.source.answer_tokens(planned) for planned, _, _ in members]  # None: until the model ends them
        answers = None if None in answers else [min(n, max_new_tokens) for n in answers]
        hits, layer_hits = self.reuse.hits, self.layers.hits
        batch = [inputs for _, _, inputs in members]
        try:
            generation = self.executor.generate(batch, run.press, max_new_tokens, answers, how.batch_size)
            if how.times_again(generation.timing.compiled):  # it compiled or captured: time it again, warm
                generation = self.executor.generate(batch, run.press, max_new_tokens, answers, how.batch_size)
        except Exception as error:
            release_memory()
            if len(members) > 1:  # find the sample that fails: each alone (``schedule``)
                for member in members:
                    self._generate(task, run, [member], how, bar)
                return
            planned, base, _ = members[0]
            self._append(task, planned, base, run, how, error=error)
            bar.update()
            return
        record = Generation(
            batch_size=len(members), batch_id=uuid.uuid4().hex[:12], encoder_reused=self.reuse.hits > hits,
            layers_reused=self.layers.hits > layer_hits, engine=generation.engine, engine_note=generation.note or None,
            graphs_captured=generation.graphs_captured, compilations=generation.compilations,
        )
        for (planned, base, _), sample in zip(members, generation.samples):
            self._append(task, planned, base, run, how, sample=sample, record=record, timing=_timing(generation, sample, how))
            bar.update()

    def _base(self, loaded: LoadedModel, task: Task, planned: PlannedSample, settings_id: str, warmup: bool) -> ResultRow:
        """The row of ``planned`` before any run: the sample as this sweep sees it."""
        sample = planned.sample
        return ResultRow(
            model=loaded.name, family=loaded.family.name, task=task.name, sample_id=sample.id,
            item=sample.item, input_hash=planned.input_hash, grade_hash=planned.grade_hash, settings_id=settings_id,
            reference=sample.answer, meta=sample.meta, position=sample.position, warmup=warmup,
            dry_run=self.source.dry_run, audio_input=self._audio_input(planned),
        )

    def _audio_input(self, planned: PlannedSample) -> str | None:
        """Under ``--no-audio``, what stood for the sample's audio: ``none``, or the task's ``caption``;
        None otherwise (the prompt held its audio)."""
        if not self.config.no_audio:
            return None
        return "caption" if planned.prompt is not None and planned.prompt.captioned else "none"

    def _append(self, task: Task, planned: PlannedSample, base: ResultRow, run: PlannedRun, how: Pass, *,
                sample: SampleOutput | None = None, record: Generation | None = None,
                timing: SampleTiming | BatchTiming | None = None, error: Exception | None = None) -> None:
        """``base`` under ``run``: its output graded (or its error), appended to the store."""
        output = sample.output if sample is not None else None
        grade = task.grade(output, planned.sample, self.judge, failure=None if error is None else str(error))
        error = error or grade.error
        kept, kept_video = kept_counts(base.received, sample.kept if sample is not None else None)
        self.store.append(replace(
            base, method=run.method, ratio=run.ratio, layer=run.layer, method_id=run.method_id, output=output,
            parsed=grade.parsed, scores=grade.scores, kept_tokens=kept, kept_video_tokens=kept_video,
            error=None if error is None else f"{type(error).__name__}: {error}", time=now(), pass_name=how.name,
            generation=record, timing=timing,
        ))


def _timing(generation: BatchGeneration, sample: SampleOutput, how: Pass) -> SampleTiming | BatchTiming:
    """A row's times: its own call's (a timed pass), or its batch's call's."""
    timing = generation.timing
    if how.timed:
        return SampleTiming(
            prefill_s=timing.prefill_s, decode_s=timing.decode_s, new_tokens=sample.new_tokens,
            peak_memory_bytes=timing.peak_memory_bytes, kv_cache_bytes=timing.kv_cache_bytes,
            kv_held_bytes=timing.kv_held_bytes, cache=timing.cache, compiled=timing.compiled,
            decode_tokens_per_s=timing.decode_tokens_per_s,
        )
    return BatchTiming(prefill_s=timing.prefill_s, decode_s=timing.decode_s, new_tokens=sample.new_tokens,
                       batch_new_tokens=timing.new_tokens, cache=timing.cache, compiled=timing.compiled)
