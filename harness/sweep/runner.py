"""The sweep runner: every model x task x (baseline + method x ratio), one sample at a time.

Samples are the outer loop: a sample's audio is loaded and its prompt built once, then the unpruned
baseline and every method x ratio run on the same inputs, back to back. Each run is one ``generate``
call, timed by ``timing.timed_generate``, and its result line is appended immediately. A run whose
key is already in the results folder is skipped, so rerunning an interrupted command resumes it.
A failure (unreadable audio, out of memory, a bug in one press) becomes an error line and the
sweep goes on. Under ``accelerate launch`` each process takes every N-th sample. Models run with
``kvprune.fast_audio_encoder`` unless the config says ``encoder: stock``. Each model loaded appends
a line to ``runs.jsonl``: where it ran, the versions, the encoder path and what it changed, and
each task's resolved config.
"""

from __future__ import annotations

import hashlib
import json
import platform
from contextlib import ExitStack, nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers
from tqdm.auto import tqdm

import kvprune
from kvprune.encoders import FastAudioEncoder, fast_audio_encoder
from kvprune.models.loading import LoadedModel, load_model
from kvprune.press import Press

from ..audio import duration_seconds
from ..options import resolve_cache
from ..demo import DEMO, DEMO_MODEL_DIR
from ..tasks.protocols import keep_rule
from ..tasks.suites import expand_suites
from ..tasks.task import Sample, Task, TaskDataError, get_task
from ..timing import timed_generate
from .config import BASELINE, SweepConfig
from .store import ResultStore, append_run, run_key


def _distributed() -> tuple[int, int, str | None]:
    """(rank, world size, device) under ``accelerate launch``; (0, 1, None) otherwise."""
    try:
        from accelerate import PartialState
    except ImportError:  # accelerate is a dependency, but keep single-process runs independent of it
        return 0, 1, None
    state = PartialState()
    if state.num_processes == 1:
        return 0, 1, None
    return state.process_index, state.num_processes, str(state.device)


@dataclass(frozen=True)
class PlannedRun:
    """One method at one ratio, with the press that runs it (None: the unpruned baseline)."""

    method: str  # the method's canonical label, or BASELINE
    ratio: float
    press: Press | None

    @property
    def layer(self) -> int | None:
        return None if self.press is None else self.press.layer


def runs_of(config: SweepConfig) -> list[PlannedRun]:
    """The unpruned baseline once, then every method at every ratio (with the protocol's keep rule)."""
    rule = keep_rule(config.protocol)
    return [PlannedRun(BASELINE, 0.0, None)] + [
        PlannedRun(m.label, r, m.build(r, config.layer, rule)) for m in config.methods for r in config.ratios
    ]


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


def prompt_hash(model: str, prompt: str, sample: Sample) -> str:
    text = json.dumps([model, prompt, [p.name for p in sample.audio]], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SweepRunner:
    def __init__(self, config: SweepConfig, progress: bool = True):
        self.config = config
        self.progress = progress
        self.rank, self.world_size, device = _distributed()
        self.device = config.device or device
        self.tasks = load_tasks(config.tasks, config.protocol)
        self.store = ResultStore(config.out, self.rank, self.world_size)
        self.runs = runs_of(config)

    def run(self) -> Path:
        try:
            for model_name in self.config.models:
                self._run_model(model_name)
        finally:
            self.store.close()
        return self.config.out

    # -- per model / task ------------------------------------------------------------------------
    def _run_model(self, model_name: str) -> None:
        done = self.store.done_keys(self.config.retry_errors)
        plan = [(task, self._work(model_name, task, done)) for task in self.tasks]
        plan = [(task, work) for task, work in plan if work]
        if not plan:
            return
        loaded = self._load(model_name)
        with ExitStack() as model_lifetime:  # the fast encoder's handle lives as long as the model runs
            fast = self.config.encoder == "fast"
            encoder = model_lifetime.enter_context(fast_audio_encoder(loaded.model)) if fast else None
            self._write_run_info(loaded, encoder)
            warm = False
            for task, work in plan:
                bar = tqdm(total=sum(len(w[3]) for w in work), desc=f"{Path(model_name).name}/{task.name}", disable=not self.progress)
                for sample, prompt, digest, todo in work:
                    self._run_sample(loaded, task, sample, prompt, digest, todo, warmup=not warm, bar=bar)
                    warm = True
                bar.close()

    def _work(self, model_name: str, task: Task, done: set[tuple]) -> list[tuple]:
        """(sample, prompt, prompt hash, runs not done yet) for each sample of ``task`` with runs left."""
        work = []
        for sample in self._samples(task):
            prompt = task.render(sample)
            digest = prompt_hash(model_name, prompt.text, sample)
            todo = [r for r in self.runs if self._key(model_name, task, r, sample, digest) not in done]
            if todo:
                work.append((sample, prompt, digest, todo))
        return work

    def _samples(self, task: Task) -> list[Sample]:
        samples = task.load(self.config.data_root, limit=self.config.limit, strict=False)  # a bad item is its own error
        return samples[self.rank :: self.world_size]

    def _load(self, model_name: str) -> LoadedModel:
        """The model, under the name the user gave (``demo``: the embedded demo model's folder)."""
        c = self.config
        loaded = load_model(
            DEMO_MODEL_DIR if model_name == DEMO else model_name, dtype=c.dtype, device=self.device,
            device_map=c.device_map, attn_implementation=c.attn_implementation, trust_remote_code=c.trust_remote_code,
        )
        return replace(loaded, name=model_name)

    def _key(self, model_name, task, run: PlannedRun, sample, digest) -> tuple:
        return run_key(dict(
            model=model_name, task=task.name, method=run.method, ratio=run.ratio, layer=run.layer,
            sample_id=sample.id, prompt_hash=digest,
        ))

    # -- per sample ------------------------------------------------------------------------------
    def _run_sample(self, loaded, task, sample, prompt, digest, todo, warmup, bar) -> None:
        base = dict(
            model=loaded.name, family=loaded.family.name, task=task.name, sample_id=sample.id,
            item=sample.item, prompt_hash=digest, reference=sample.answer, meta=sample.meta, position=sample.position,
            warmup=warmup,
        )
        try:
            if sample.problem:
                raise TaskDataError(sample.problem)
            waves, model_prompt = prompt.load(task.channels)
            inputs = loaded.build_inputs(waves, model_prompt)
            base.update(audio_seconds=duration_seconds(waves), audio_tokens=loaded.audio_tokens(inputs["input_ids"]))
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

    def _generate(self, loaded: LoadedModel, task: Task, inputs: dict, press: Press | None) -> dict:
        tokenizer = getattr(loaded.processor, "tokenizer", loaded.processor)
        generate_kwargs = dict(
            max_new_tokens=self.config.max_new_tokens or task.max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        )
        if resolve_cache(self.config.cache, loaded.model.device) == "static":
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


def run_sweep(config: SweepConfig, progress: bool = True) -> Path:
    return SweepRunner(config, progress=progress).run()
