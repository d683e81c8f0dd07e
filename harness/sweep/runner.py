"""The sweep runner: every model x task x (baseline + method x ratio), one sample at a time.

Before anything runs, a start takes its folder (``folder``: created if needed, locked for one
writer), checks every method at every ratio against each model's skeleton (a layer out of range is
an error before the first sample, not one per sample), works out its plan (``plan``: what every
run's results depend on) and refuses a folder whose results were made with other settings. A start
that fails leaves the folder as it found it; a model that cannot take the images or videos of a task
(``media.check_media``: a family that does not see, a chat template that drops them) fails it so.
Then it sets aside the lines of its results file that hold no result and scores again the stored
outputs whose samples' labels changed (``rescore``).

Samples are the outer loop (``samples.SampleRunner``): a sample's inputs are prepared once, then the
unpruned baseline and every method x ratio run on them back to back, each result line appended
immediately. A run whose identity is already in the results folder is skipped, so rerunning an
interrupted command resumes it. Under ``accelerate launch`` each process takes every N-th sample
(``distributed``). Models run with ``kvprune.fast_audio_encoder`` unless the config says ``encoder:
stock``. Each model loaded appends a line to ``runs.jsonl``: where it ran, the versions, the encoder
path and what it changed, and each task's resolved config. Under a protocol with conventions per
model family, each model runs its family's form of every task (``plan.tasks_by_model``: the family
read from the checkpoint's config before anything loads, as ``load_model`` reads it).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tqdm.auto import tqdm

import time

from kvprune.encoders import FastAudioEncoder, fast_audio_encoder
from kvprune.generation.prefill import prefill_layers_way
from kvprune.generation.timing import compile_counters
from kvprune.models.loading import LoadedModel

from ..setup.device import cpu_threads, default_device, resolve_cache
from ..setup.environment import environment, host_loop_ns, now
from ..setup.methods import check_methods, check_presses
from .config import SweepConfig
from .distributed import barrier, finish, process_share
from .folder import ResultsFolder
from .identity import AudioDigests, SweepPlan
from .execute import Executor
from .media import check_media
from .judging import record_judge, sweep_judge, unreachable
from .plan import PlannedRun, PlannedSample, checked_presses, plan_sweep, runs_of, tasks_by_model
from .rescore import regrade_judge_failures, rescore
from .samples import SampleRunner
from .schedule import Pass, Schedule, Work
from .source import Checkpoints
from .rows import RunKey
from .store import ENGINE_RECORD, TASK_TIME_RECORD, ResultStore, append_log_line


@dataclass
class SweepOutcome:
    """What one ``kvprune sweep`` process did: its folder and rank, and the rows it wrote."""

    out: Path
    rank: int
    world_size: int
    written: int
    notes: list[str]


class SweepInterrupted(Exception):
    """Ctrl-C (or SIGINT) stopped the sweep; everything written so far is kept."""

    def __init__(self, written: int, out: Path):
        super().__init__(f"interrupted after {written} new result rows in {out}")
        self.written, self.out = written, out


class SweepRunner:
    def __init__(self, config: SweepConfig, progress: bool = True, command: str | None = None,
                 source: Checkpoints | None = None):
        self.config = config
        self.source = source or Checkpoints()  # where models and samples come from (a dry run: elsewhere)
        self.progress = progress
        self.command = command  # the command line, recorded in runs.jsonl
        self.started = datetime.now(timezone.utc).isoformat(timespec="microseconds")  # this start, in every row it writes
        self.rank, self.world_size, device = process_share()
        self.device = config.device or device
        self.tasks = tasks_by_model(config, self.source)  # per model: under a protocol, its family's conventions
        self.cache = resolve_cache(config.cache, self.device or default_device())
        self.runs = runs_of(config)
        self.schedule = Schedule.of(config)  # its passes, batches and timing subset
        self.presses = checked_presses(self.runs)  # one per method, checked against each model
        self.store: ResultStore | None = None
        self.plan: SweepPlan | None = None
        self._samples: dict[str, list[PlannedSample]] = {}  # per task, this process's share
        self._digests: AudioDigests | None = None
        self._folder: ResultsFolder | None = None
        self.judge = None  # built when the folder is taken (its cache lives there)

    def run(self) -> SweepOutcome:
        """Take the folder, check the configuration against each model and against the folder, then
        run what is not done yet."""
        out = self.config.out
        with ResultsFolder(out, self.rank, self.world_size) as folder:
            self._folder = folder
            try:
                self._check_methods()
                self._digests = AudioDigests(out, rehash=self.config.rehash_audio)
                self.plan, planned = plan_sweep(self.config, self.tasks, self.runs, self.cache, self._digests, self.source)
                check_media(self.config, self.tasks, planned)
                self._samples = {name: samples[self.rank :: self.world_size] for name, samples in planned.items()}
                folder.check(self.plan, self.config.overwrite)
                barrier()
                self.store = ResultStore(out, self.rank, self.world_size, started=self.started)
                self.judge = sweep_judge(self.config.judge, out)
                self._tidy(folder)
                todo = sum(self._run_model(model_name) for model_name in self.config.models)
                if unreachable(self.judge):
                    folder.notes.append(unreachable(self.judge))
                if not todo:
                    folder.notes.append(f"nothing left to run: every run this sweep asks for has a result in {out} "
                                        "already (--retry-errors reruns the failed ones); the outputs are written again "
                                        "from them.")
                folder.record(self.plan, self._digests)
            except KeyboardInterrupt:
                raise SweepInterrupted(self.store.written if self.store else 0, out) from None
            finally:
                if self.store is not None:
                    self.store.close()
                if self.judge is not None:
                    record_judge(out, self.config.judge, self.judge, self.rank)
        finish()  # every process has finished before the outputs are written
        return SweepOutcome(out, self.rank, self.world_size, self.store.written, folder.notes)

    def _tidy(self, folder: ResultsFolder) -> None:
        """Before running anything: set aside the lines of this process's results file that hold no
        result, and score again the stored outputs whose samples' answers or metadata changed."""
        moved = self.store.set_aside_unreadable()
        if moved:
            folder.notes.append(moved)
        tasks = {task.name: task for model_tasks in self.tasks.values() for task in model_tasks}
        rows, samples = rescore(self.store, self.plan, list(tasks.values()), self._samples, self.judge)
        if rows:
            folder.record(self.plan, self._digests)
            folder.notes.append(f"scored {rows} stored result(s) of {samples} sample(s) again from their stored outputs: "
                                "their answers or metadata changed, their prompt and audio did not (nothing was generated "
                                "again for them).")
        if self.config.retry_errors and self.judge is not None:
            tried, graded = regrade_judge_failures(self.store, self.plan, list(tasks.values()), self._samples, self.judge)
            if tried:
                folder.record(self.plan, self._digests)
                folder.notes.append(f"--retry-errors: graded {graded} of the {tried} stored output(s) whose grading the "
                                    "judge had failed again with it (nothing was generated again for them).")

    def _check_methods(self) -> None:
        """Every method (``checked_presses``) against each model's skeleton (its modules on the meta device:
        no weights are read), so that a bad layer or parameter stops the sweep before anything runs."""
        c = self.config
        for name in c.models:
            build = self.source.skeleton(name, c.trust_remote_code, c.attn_implementation)
            check_methods(name, build, self.presses, static=self.cache == "static", prunes=True)

    # -- per model --------------------------------------------------------------------------------
    def _run_model(self, model_name: str) -> int:
        """Run what is not done yet of ``model_name``'s share; returns how many runs that was."""
        done = self.store.done_keys(self.config.retry_errors)
        plan = [(task, self._work(model_name, task, done)) for task in self.tasks[model_name]]
        plan = [(task, work) for task, work in plan if any(pending for _, pending in work)]
        if not plan:
            return 0
        loaded = self._load(model_name)
        check_presses(loaded.model, model_name, self.presses, static=self.cache == "static", prunes=True)
        self._folder.record(self.plan, self._digests)
        executor = Executor(loaded, self.cache, self.presses.values(), self.config.compile_prefill)
        samples = SampleRunner(self.config, self.store, executor, self.judge, self.source)
        with ExitStack() as model_lifetime:  # the fast encoder's handle and the CPU threads last as long as the model runs
            fast = self.config.encoder == "fast"
            encoder = model_lifetime.enter_context(fast_audio_encoder(loaded.model)) if fast else None
            threads = model_lifetime.enter_context(cpu_threads(loaded.model))
            self._record_model(loaded, encoder, threads)
            warm = False
            for task, work in plan:
                total = _runs_in(work)
                bar = tqdm(total=total, desc=f"{Path(model_name).name}/{task.name}", disable=not self.progress, unit="run")
                settings_id = self.plan.settings_ids[model_name][task.name]
                host, start, compiled = host_loop_ns(), time.perf_counter(), _compiled_so_far(executor)
                for how, pending in work:
                    for batch in self.schedule.batches(how, pending):  # by length when batched
                        samples.run_batch(loaded, task, batch, settings_id=settings_id, runs=self.runs, warmup=not warm,
                                          bar=bar, how=how)
                        warm = True
                bar.close()
                made = {name: count - compiled[name] for name, count in _compiled_so_far(executor).items()}
                self._record_task_time(model_name, task.name, time.perf_counter() - start, work, made, host)
            self._record_engine(loaded, executor)
        return sum(_runs_in(work) for _, work in plan)

    def _work(self, model_name: str, task, done: set[RunKey]) -> list[tuple[Pass, list[Work]]]:
        """Per pass of the schedule, this process's samples of ``task`` it takes, under the runs not
        done yet."""
        settings_id = self.plan.settings_ids[model_name][task.name]
        share = self._samples[task.name]
        places = [self.rank + index * self.world_size for index in range(len(share))]  # in the whole task

        def todo(how: Pass, planned: PlannedSample) -> list[PlannedRun]:
            return [run for run in self.runs if _key(model_name, task.name, run, planned, settings_id, how.name) not in done]

        return self.schedule.work(zip(places, share), todo)

    def _load(self, model_name: str) -> LoadedModel:
        """The model, under the name the user gave (``demo``: the embedded demo model's folder); how long
        loading took is recorded (what ``kvprune estimate`` is checked against includes it)."""
        start = time.perf_counter()
        loaded = self.source.load(model_name, self.config, self.device)
        append_log_line(self.config.out, dict(time=now(), model=model_name, kind=TASK_TIME_RECORD, task=None,
                                         seconds=round(time.perf_counter() - start, 3), rank=self.rank))
        return loaded

    def _record_task_time(self, model_name: str, task: str, seconds: float, work: list[tuple[Pass, list[Work]]],
                          made: dict[str, int], host_ns: float) -> None:
        """How long this process took over a task's runs (``runs.jsonl``): a sweep's cost, measured, with the
        compiled graphs and CUDA graphs made during them (``made``), which ``kvprune estimate`` prices per task, and
        the host's speed as it started (``host_ns``: launch-bound calls follow it)."""
        append_log_line(self.config.out, dict(
            time=now(), model=model_name, kind=TASK_TIME_RECORD, task=task, seconds=round(seconds, 3), rank=self.rank,
            runs={str(how.name): _runs_in([(how, pending)]) for how, pending in work}, **made,
            host_loop_ns=round(host_ns, 1),
        ))

    def _record_engine(self, loaded: LoadedModel, executor: Executor) -> None:
        """What decoding compiled and kept for this model (``runs.jsonl``): compiled graphs, captured CUDA
        graphs, decode states and the memory they hold, any run that could not use a graph and why, and how the
        prefills ran their decoder layers >= K (``compile_prefill``)."""
        engine = executor.engine
        if engine is None:
            return
        append_log_line(self.config.out, dict(
            time=now(), model=loaded.name, kind=ENGINE_RECORD, **_compiled_so_far(executor), recompiles=compile_counters()[1],
            decode_states=engine.states, decode_state_bytes=engine.state_bytes,
            fallbacks=engine.fallbacks, unsupported=engine.unsupported, prefill_layers=prefill_layers_way(engine.module),
        ))

    def _record_model(self, loaded: LoadedModel, encoder: FastAudioEncoder | None, threads: int) -> None:
        """Record what runs where (card, versions, audio encoder path) and each task as it runs, so
        that numbers can be traced and results summarised even after a task file changes."""
        where = environment(self.device)
        append_log_line(self.config.out, dict(
            time=where.time,
            started=self.started,
            command=self.command,
            **({"dry_run": self.source.dry_run} if self.source.dry_run else {}),
            model=loaded.name,
            family=loaded.family.name,
            encoder=self.config.encoder,
            encoder_changes=list(encoder.changes) if encoder else [],
            encoder_unchanged=list(encoder.unchanged) if encoder else [],
            config=vars(self.config),
            tasks={task.name: task.config for task in self.tasks[loaded.name]},
            settings=self.plan.settings,
            model_fingerprint=self.plan.models[loaded.name],
            methods=self.plan.methods,
            device=where.card,
            cpu_threads=threads,
            rank=self.rank,
            world_size=self.world_size,
            versions=where.versions,
        ))


def _compiled_so_far(executor: Executor) -> dict[str, int]:
    """Graphs compiled (torch.compile) and CUDA graphs captured (the engine's decode states) in this process so far."""
    return dict(compile_graphs=compile_counters()[0],
                cuda_graphs=executor.engine.captures if executor.engine is not None else 0)


def _runs_in(work: list[tuple[Pass, list[Work]]]) -> int:
    return sum(len(item.runs) for _, pending in work for item in pending)


def _key(model_name: str, task_name: str, run: PlannedRun, planned: PlannedSample, settings_id: str,
         pass_name: str | None) -> RunKey:
    return RunKey.of(model=model_name, task=task_name, method=run.method, ratio=run.ratio, layer=run.layer,
                     method_id=run.method_id, sample_id=planned.sample.id, input_hash=planned.input_hash,
                     settings_id=settings_id, pass_name=pass_name)


def run_sweep(config: SweepConfig, progress: bool = True, command: str | None = None,
              source: Checkpoints | None = None) -> SweepOutcome:
    """Run ``config`` (``command``: the command line that asked for it, for the records; ``source``: where
    models and samples come from, checkpoints and --data-root unless a dry run says otherwise)."""
    return SweepRunner(config, progress=progress, command=command, source=source).run()
