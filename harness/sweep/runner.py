"""The sweep runner: every model x task x (baseline + method x ratio), one sample at a time.

Before anything runs, a start locks its folder (``lock``: one writer per folder), works out its plan
(``identity``: what every run's results depend on), refuses a folder whose results were made with
other settings, and checks every method at every ratio against each model (a layer out of range is
an error before the first sample, not one per sample). A start that fails leaves the folder as it
found it.

Samples are the outer loop: a sample's audio is loaded (by the task's channel policy), fitted to what
the model takes (the task's long-audio policy: ``harness.long_audio``) and its prompt built once, then
the unpruned baseline and every method x ratio run on the same inputs, back to back. Each run is one
``generate`` call on the cache ``--cache`` resolves to, timed by ``timing.timed_generate``, and its
result line is appended immediately. A run whose identity is already in the results folder is
skipped, so rerunning an interrupted command resumes it. A failure (an item that cannot be read,
unreadable audio, out of memory, a bug in one press) becomes an error line and the sweep goes on.
Under ``accelerate launch`` each process takes every N-th sample. Models run with
``kvprune.fast_audio_encoder`` unless the config says ``encoder: stock``. Each model loaded appends
a line to ``runs.jsonl``: where it ran, the versions, the encoder path and what it changed, and
each task's resolved config.
"""

from __future__ import annotations

import os
import platform
from contextlib import ExitStack, nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn as nn
import transformers
from tqdm.auto import tqdm

import kvprune
from kvprune.encoders import FastAudioEncoder, fast_audio_encoder
from kvprune.models.loading import LoadedModel, family_of_checkpoint, load_model
from kvprune.press import Press

from ..demo import DEMO, DEMO_MODEL_DIR
from ..long_audio import model_inputs
from ..setup.device import resolve_cache
from ..setup.methods import check_presses
from ..tasks.prompts import RenderedPrompt
from ..tasks.protocols import keep_rule
from ..tasks.suites import expand_suites
from ..tasks.task import Sample, Task, TaskDataError, get_task
from ..timing import timed_generate
from .config import BASELINE, SweepConfig, SweepConfigError
from .identity import AudioDigests, SweepPlan, digest, input_hash, model_fingerprint, read_plan, write_plan
from .lock import FolderLock
from .store import ResultStore, append_run, clear_outputs, results_files, run_key


def _distributed() -> tuple[int, int, str | None]:
    """(rank, world size, device) under ``accelerate launch``; (0, 1, None) otherwise."""
    try:
        from accelerate import PartialState
    except ImportError:  # accelerate is a dependency, but keep single-process runs independent of it
        return 0, 1, None
    # accelerate starts a process group on a host without GPUs only when told to use the CPU
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    state = PartialState(cpu=launched and not torch.cuda.is_available())
    if state.num_processes == 1:
        return 0, 1, None
    return state.process_index, state.num_processes, str(state.device)


@dataclass(frozen=True)
class PlannedRun:
    """One method at one ratio, with the press that runs it (None: the unpruned baseline)."""

    method: str  # the method's canonical label, or BASELINE
    ratio: float
    press: Press | None
    spec: str | None = None  # the method's full spec: every parameter of every press, layer included
    method_id: str = BASELINE  # a digest of ``spec``: what results are grouped and resumed by

    @property
    def layer(self) -> int | None:
        return None if self.press is None else self.press.layer


def runs_of(config: SweepConfig) -> list[PlannedRun]:
    """The unpruned baseline once, then every method at every ratio (with the protocol's keep rule)."""
    rule = keep_rule(config.protocol)
    runs = [PlannedRun(BASELINE, 0.0, None)]
    for method in config.methods:
        spec = repr(method.build(0.0, config.layer, rule))  # the ratio is the sweep's, apart
        runs += [PlannedRun(method.label, r, method.build(r, config.layer, rule), spec, digest(spec)) for r in config.ratios]
    return runs


def load_tasks(names: list[str], protocol: str | None = None) -> list[Task]:
    """The tasks of ``--tasks`` (names, suite names or YAML paths), under ``protocol`` when given;
    two of one name would mix their results."""
    names = expand_suites(names)
    tasks = [get_task(name) for name in names]
    tasks = [task.under(protocol) for task in tasks] if protocol else tasks
    seen: dict[str, str] = {}
    for name, task in zip(names, tasks):
        if task.name in seen:
            raise ValueError(
                f"tasks {seen[task.name]!r} and {name!r} are both named {task.name!r}, so their results would mix: "
                "give one of them another name (the name: field of its YAML file)."
            )
        seen[task.name] = name
    return tasks


def _model_path(model_name: str) -> str:
    """Where a model named on the command line is (``demo``: the embedded demo model's folder)."""
    return str(DEMO_MODEL_DIR) if model_name == DEMO else model_name


def _skeleton(path: str, config: SweepConfig) -> nn.Module | None:
    """The model's modules built on the meta device from its config (no weights read), for checking
    presses against it; None when it cannot be built so (the loaded model is checked instead)."""
    family, model_type = family_of_checkpoint(path, config.trust_remote_code)
    try:
        model_config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=config.trust_remote_code)
        class_name = family.model_types[model_type]
        with torch.device("meta"):
            if class_name == family.model_class:  # the family's own build (Gemma-3n: without its vision tower)
                return family.build(model_config, attn_implementation=config.attn_implementation)
            if class_name:
                return getattr(transformers, class_name)._from_config(model_config, attn_implementation=config.attn_implementation)
            return transformers.AutoModelForCausalLM.from_config(model_config, trust_remote_code=config.trust_remote_code)
    except Exception:  # e.g. remote code that computes on its weights at init
        return None


def _make_folder(out: Path) -> bool:
    """Create the results folder if needed (True if it was created); an error that says so if it
    cannot be written."""
    existed = out.is_dir()
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".kvprune-write-test.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise SweepConfigError(
            f"cannot write results to {out} ({error.strerror or error}): give a folder you can write to with --out."
        ) from None
    return not existed


def _remove_if_empty(out: Path, created: bool) -> None:
    """Leave no trace of a start that failed: remove the folder it created, if nothing is in it."""
    if created:
        try:
            out.rmdir()
        except OSError:
            pass


def _barrier() -> None:
    """Wait for every process of an ``accelerate launch`` (a no-op in a single process)."""
    try:
        from accelerate import PartialState
    except ImportError:
        return
    PartialState().wait_for_everyone()


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
    def __init__(self, config: SweepConfig, progress: bool = True):
        self.config = config
        self.progress = progress
        self.rank, self.world_size, device = _distributed()
        self.device = config.device or device
        self.tasks = load_tasks(config.tasks, config.protocol)
        self.cache = resolve_cache(config.cache, self.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.runs = runs_of(config)
        self.store: ResultStore | None = None
        self.plan: SweepPlan | None = None
        self._samples: dict[str, list[Sample]] = {}  # per task, this process's share
        self._inputs: dict[tuple[str, str], tuple[str, str]] = {}  # (task, sample id) -> (prompt, input hash)
        self._digests: AudioDigests | None = None
        self.notes: list[str] = []  # what the user should know about this start (printed by the CLI)
        self._plan_written = False

    def run(self) -> SweepOutcome:
        """Lock the folder, check the configuration against it and against each model, then run what
        is not done yet. A start that fails before its first write leaves the folder as it found it."""
        out = self.config.out
        created = _make_folder(out)
        lock = FolderLock(out, self.rank, self.world_size)
        try:
            lock.acquire()
        except BaseException:
            _remove_if_empty(out, created)
            raise
        try:
            if lock.taken_over:
                self.notes.append(f"took over the lock left by a sweep that no longer runs (pid {lock.taken_over.get('pid')}, "
                                  f"started {lock.taken_over.get('started')}); its results so far are kept.")
            self._check_methods(self.config.models)
            self._digests = AudioDigests(out)
            self.plan = self._build_plan(self._digests)
            self._check_recorded(self.plan)
            _barrier()
            self.store = ResultStore(out, self.rank, self.world_size)
            todo = sum(self._run_model(model_name) for model_name in self.config.models)
            if not todo:
                self.notes.append(f"nothing left to run: every run this sweep asks for has a result in {out} already "
                                  "(--retry-errors reruns the failed ones); the outputs are written again from them.")
            self._write_plan()
        except KeyboardInterrupt:
            raise SweepInterrupted(self.store.written if self.store else 0, out) from None
        finally:
            if self.store is not None:
                self.store.close()
            lock.release()
            if not self._plan_written:
                _remove_if_empty(out, created)
        _barrier()  # every process has finished before the outputs are written
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()  # nothing is exchanged after this barrier
        return SweepOutcome(out, self.rank, self.world_size, self.store.written, self.notes)

    # -- identity ---------------------------------------------------------------------------------
    def _build_plan(self, digests: AudioDigests) -> SweepPlan:
        """Everything this configuration asks for, with what its results depend on."""
        c = self.config
        fingerprints = {name: model_fingerprint(_model_path(name), c.trust_remote_code) for name in c.models}
        settings = dict(
            dtype=c.dtype, attn_implementation=c.attn_implementation, max_new_tokens=c.max_new_tokens,
            protocol=c.protocol, cache=self.cache, long_audio=c.long_audio,
            encoder=c.encoder,  # the same outputs either way, but not the same prefill times
        )
        methods = {
            run.method_id: dict(label=run.method, spec=run.spec, layer=run.layer)
            for run in self.runs if run.press is not None
        }
        settings_ids, samples, self._inputs = {}, {}, {}
        for task in self.tasks:
            task_settings = dict(
                settings, task=task.config, long_audio=c.long_audio_policy(task.name),
                generation=dict(max_new_tokens=c.max_new_tokens or task.max_new_tokens, do_sample=False),
            )
            for name in c.models:
                settings_ids.setdefault(name, {})[task.name] = digest(dict(task_settings, model=fingerprints[name]))
            loaded = task.load(c.data_root, limit=c.limit, strict=False)  # a bad item is its own error
            samples[task.name] = {}
            for sample in loaded:
                if sample.problem:  # recorded as that sample's error, identified by what is wrong with it
                    prompt, hashed = None, input_hash(sample.problem, [])
                else:
                    prompt = task.render(sample)
                    hashed = input_hash(prompt.text, [digests(path) for path in prompt.files])
                samples[task.name][sample.id] = hashed
                self._inputs[task.name, sample.id] = (prompt, hashed)
            self._samples[task.name] = loaded[self.rank :: self.world_size]
        return SweepPlan(
            settings=settings, models=fingerprints, tasks={t.name: t.config for t in self.tasks}, methods=methods,
            runs=[(run.method_id, run.ratio) for run in self.runs], settings_ids=settings_ids, samples=samples,
        )

    def _check_recorded(self, plan: SweepPlan) -> None:
        """Refuse to mix results of other settings into the folder (or clear it, with --overwrite)."""
        out = self.config.out
        recorded = read_plan(out)
        has_results = bool(results_files(out))
        if self.config.overwrite:
            if self.rank == 0 and (has_results or recorded):
                removed = clear_outputs(out)
                self.notes.append(f"--overwrite: removed {len(removed)} files of the earlier results in {out}.")
            return
        if recorded is None:
            if has_results:
                raise SweepConfigError(
                    f"{out} holds results without a record of the configuration that made them (plan.json; written "
                    "by kvprune since runs were identified by everything that determines their outputs), so they "
                    f"cannot be checked against this one. Give another --out, or rerun with --overwrite to discard them."
                )
            return
        differences = plan.differences(recorded)
        if differences:
            raise SweepConfigError(
                f"{out} holds results made with other settings, which this sweep would mix with its own:\n  - "
                + "\n  - ".join(differences)
                + "\nGive another --out for this configuration, or rerun with --overwrite to discard the earlier results."
            )
        changed = plan.changed_samples(recorded)
        if changed:
            self.notes.append(f"{changed} sample(s) changed since the last sweep in this folder (audio or prompt): "
                              "they run again; their earlier results are no longer summarised.")

    def _write_plan(self) -> None:
        """Record what this configuration asks for (once, before its first result)."""
        if self._plan_written:
            return
        if self.rank == 0:
            write_plan(self.config.out, self.plan)
        self._digests.save()
        self._plan_written = True

    def _check_methods(self, model_names: list[str]) -> None:
        """Every method at every ratio against each model's skeleton (its modules on the meta device:
        no weights are read), so that a bad layer or parameter stops the sweep before anything runs."""
        for name in model_names:
            skeleton = _skeleton(_model_path(name), self.config)
            if skeleton is not None:
                self._check_presses(skeleton, name)

    def _check_presses(self, model: nn.Module, model_name: str) -> None:
        """Every planned press against ``model``, and against the static cache when the sweep decodes on one."""
        presses = {(run.method, run.ratio): run.press for run in self.runs if run.press is not None}
        check_presses(model, model_name, presses, static=self.cache == "static")

    # -- per model / task ------------------------------------------------------------------------
    def _run_model(self, model_name: str) -> int:
        """Run what is not done yet of ``model_name``'s share; returns how many runs that was."""
        done = self.store.done_keys(self.config.retry_errors)
        plan = [(task, self._work(model_name, task, done)) for task in self.tasks]
        plan = [(task, work) for task, work in plan if work]
        if not plan:
            return 0
        loaded = self._load(model_name)
        self._check_presses(loaded.model, model_name)
        self._write_plan()
        with ExitStack() as model_lifetime:  # the fast encoder's handle lives as long as the model runs
            fast = self.config.encoder == "fast"
            encoder = model_lifetime.enter_context(fast_audio_encoder(loaded.model)) if fast else None
            self._write_run_info(loaded, encoder)
            warm = False
            for task, work in plan:
                bar = tqdm(total=sum(len(w[3]) for w in work), desc=f"{Path(model_name).name}/{task.name}", disable=not self.progress)
                for sample, prompt, digest_, todo in work:
                    self._run_sample(loaded, task, sample, prompt, digest_, todo, warmup=not warm, bar=bar)
                    warm = True
                bar.close()
        return sum(len(todo) for _, work in plan for *_, todo in work)

    def _work(self, model_name: str, task: Task, done: set[tuple]) -> list[tuple]:
        """(sample, prompt, input hash, runs not done yet) for each of this process's samples of ``task``."""
        work = []
        for sample in self._samples[task.name]:
            prompt, hashed = self._inputs[task.name, sample.id]
            todo = [r for r in self.runs if self._key(model_name, task, r, sample, hashed) not in done]
            if todo:
                work.append((sample, prompt, hashed, todo))
        return work

    def _load(self, model_name: str) -> LoadedModel:
        """The model, under the name the user gave (``demo``: the embedded demo model's folder)."""
        c = self.config
        loaded = load_model(
            _model_path(model_name), dtype=c.dtype, device=self.device,
            device_map=c.device_map, attn_implementation=c.attn_implementation, trust_remote_code=c.trust_remote_code,
        )
        return replace(loaded, name=model_name)

    def _key(self, model_name, task, run: PlannedRun, sample, hashed) -> tuple:
        return run_key(dict(
            model=model_name, task=task.name, method=run.method, ratio=run.ratio, layer=run.layer,
            method_id=run.method_id, sample_id=sample.id, input_hash=hashed,
            settings_id=self.plan.settings_ids[model_name][task.name],
        ))

    # -- per sample ------------------------------------------------------------------------------
    def _run_sample(self, loaded, task, sample, prompt, hashed, todo, warmup, bar) -> None:
        base = dict(
            model=loaded.name, family=loaded.family.name, task=task.name, sample_id=sample.id,
            item=sample.item, input_hash=hashed, settings_id=self.plan.settings_ids[loaded.name][task.name],
            reference=sample.answer, meta=sample.meta, position=sample.position, warmup=warmup,
        )
        try:
            if sample.problem:
                raise TaskDataError(sample.problem)
            base.update(self._prepare(loaded, task, prompt))
            inputs = base.pop("inputs")
        except Exception as error:  # one bad sample must not stop the sweep
            for run in todo:
                self._record(task, sample, base, run, error=error)
                bar.update()
            return
        for run in todo:
            try:
                outcome = self._generate(loaded, task, inputs, run.press)
            except Exception as error:
                _free_device_memory(error)
                outcome = dict(error=error)
            self._record(task, sample, base, run, **outcome)
            bar.update()

    def _prepare(self, loaded: LoadedModel, task: Task, prompt: RenderedPrompt) -> dict:
        """The model inputs of a sample, its audio read by the task's channel policy and fitted to
        what the model takes (the task's long-audio policy), with how much audio the model received."""
        waves, model_prompt = prompt.load(task.channels)
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

    def _record(self, task, sample, base, run: PlannedRun, output=None, timing=None, kept_tokens=None, error=None):
        parsed = None
        if output is not None and error is None:
            try:
                parsed = task.parse(output, sample)
            except Exception as parse_error:  # a parser bug on one output is that sample's error
                error = parse_error
        try:
            scores = task.score(parsed, sample)
        except Exception as score_error:  # so is a metric that cannot score this item
            error, scores = error or score_error, {}
        row = dict(
            base,
            method=run.method,
            ratio=run.ratio,
            layer=run.layer,
            method_id=run.method_id,
            output=output,
            parsed=parsed,
            **scores,
            kept_tokens=kept_tokens if kept_tokens is not None else base.get("audio_tokens"),
            error=None if error is None else f"{type(error).__name__}: {error}",
            time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        if timing is not None:
            row.update(asdict(timing), decode_tokens_per_s=timing.decode_tokens_per_s)
        self.store.append(row)

    def _write_run_info(self, loaded: LoadedModel, encoder: FastAudioEncoder | None) -> None:
        """Record what runs where (card, versions, audio encoder path) and each task as it runs, so
        that numbers can be traced and results summarised even after a task file changes."""
        append_run(self.config.out, dict(
            time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            model=loaded.name,
            family=loaded.family.name,
            encoder=self.config.encoder,
            encoder_changes=list(encoder.changes) if encoder else [],
            encoder_unchanged=list(encoder.unchanged) if encoder else [],
            config=vars(self.config),
            tasks={task.name: task.config for task in self.tasks},
            settings=self.plan.settings,
            model_fingerprint=self.plan.models[loaded.name],
            methods=self.plan.methods,
            device=_device_name(self.device),
            rank=self.rank,
            world_size=self.world_size,
            versions=dict(kvprune=kvprune.__version__, torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version()),
        ))


def _device_name(device: str | None) -> str:
    if torch.cuda.is_available() and (device is None or str(device).startswith("cuda")):
        return torch.cuda.get_device_name(torch.device(device or "cuda"))
    return platform.processor() or platform.machine()


def _free_device_memory(error: Exception) -> None:
    if isinstance(error, torch.OutOfMemoryError) and torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_sweep(config: SweepConfig, progress: bool = True) -> SweepOutcome:
    return SweepRunner(config, progress=progress).run()
