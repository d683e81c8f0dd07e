"""How ``kvprune estimate`` times a sweep: the sweep's own ``SampleRunner`` and ``Executor`` on a few
batches and samples of each task, every generation call and every batch clocked.

``TimedExecutor`` is the sweep's executor with a clock around each call (the device synchronised at
both ends), recording what the call ran (its run, rows, prompt and kept lengths, tokens generated,
whether it compiled or captured a graph). ``TimedBatches.time_batch`` runs one batch exactly as the sweep
does (its inputs prepared, then every run, the audio encoder output and layers < K shared between
them as the pass says) and records the batch's wall time, and the host's speed just before it (a fixed
Python loop, ``setup.environment.host_loop_ns``: launch-bound calls follow it, so a task priced on a slowed
host shows it): what the calls leave of it is the batch's own work (reading audio, building inputs, grading,
writing rows: to a scratch folder, as the sweep writes them).
Part of that work comes with every run (grading its answers, writing its rows, setting up the next), and a
timed batch runs only the timed runs: the gap between one call's end and the next call's start is one run's
share, which the pricing adds for each run the sweep makes beyond them.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

import torch

from kvprune.models.loading import LoadedModel

from ..setup.environment import host_loop_ns
from ..sweep.execute import BatchGeneration, Executor
from ..sweep.plan import PlannedRun, checked_presses
from ..sweep.samples import SampleRunner
from ..sweep.schedule import Pass, Work


@dataclass
class Call:
    """One generation call, as the estimate clocked it."""

    context: dict  # task, mode, unit (the batch or sample it belongs to), repeat
    run: int  # its run's index in the sweep's runs
    rows: int
    seconds: float  # wall time, the device synchronised at both ends
    prefill_s: float
    decode_s: float
    compiled: bool  # it made torch.compile graphs (a cost once per sweep)
    captured: int  # CUDA graphs it captured (a cost once per decode state shape)
    first: bool  # the first call of its run in this process (lazy set-up: a cost once per sweep too)
    prompt_tokens: list[int]
    audio_tokens: list[int]
    kept_tokens: list[int | None]  # audio placeholders each row kept (None: its press pruned no audio)
    generated: int  # tokens generated per row (the longest row's)
    started: float  # time.perf_counter() at its start and end (the device synchronised)
    ended: float


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TimedExecutor(Executor):
    """The sweep's executor, each call clocked and recorded in ``calls`` under ``context``."""

    def __init__(self, loaded: LoadedModel, cache: str, runs: list[PlannedRun], compile_prefill: bool | str = "auto"):
        super().__init__(loaded, cache, checked_presses(runs).values(), compile_prefill)  # the sweep's engine
        self.calls: list[Call] = []
        self.context: dict = {}
        self._runs = {id(run.press): index for index, run in enumerate(runs)}
        self._seen: set[int] = set()

    def generate(self, inputs: list[dict], press, max_new_tokens: int, answers: list[int] | None = None,
                 batch_size: int | None = None) -> BatchGeneration:
        device = self.loaded.device
        synchronise(device)
        start = time.perf_counter()
        generation = super().generate(inputs, press, max_new_tokens, answers, batch_size)
        synchronise(device)
        seconds = time.perf_counter() - start
        run = self._runs[id(press)]
        first, _ = run not in self._seen, self._seen.add(run)
        self.calls.append(Call(
            dict(self.context), run, len(inputs), seconds, generation.timing.prefill_s,
            generation.timing.decode_s, generation.compilations > 0, generation.graphs_captured, first,
            [int(batch["input_ids"].shape[1]) for batch in inputs], [self.loaded.audio_tokens(b["input_ids"]) for b in inputs],
            [(sample.kept or {}).get("audio") for sample in generation.samples], int(generation.timing.new_tokens),
            start, start + seconds,
        ))
        return generation


@dataclass
class Unit:
    """A batch (the sweep's scoring pass) or one sample (alone), as the estimate ran it once."""

    context: dict
    seconds: float  # wall time of the whole batch: preparation, every run, grading
    audio_seconds: float  # the mean audio length of its samples
    size: int
    runs: int  # the runs it ran (the timed ones)
    between_runs: float  # median seconds from one call's end to the next one's start: one run's own work
    host_loop_ns: float = math.nan  # the host's speed just before it (``setup.environment.host_loop_ns``)


@dataclass
class TimedBatches:
    """Runs batches of one model through the sweep's ``SampleRunner`` and records their wall times."""

    runner: SampleRunner
    executor: TimedExecutor
    loaded: LoadedModel
    units: list[Unit] = field(default_factory=list)

    def time_batch(self, task, batch: list[Work], runs: list[PlannedRun], how: Pass, context: dict) -> None:
        """``batch`` as the sweep's scoring or timing pass gives it (``schedule``)."""
        self.executor.context = context
        synchronise(self.loaded.device)
        host = host_loop_ns()
        start, before = time.perf_counter(), len(self.executor.calls)
        self.runner.run_batch(self.loaded, task, batch, settings_id="estimate", runs=runs, warmup=False, bar=_NoBar(), how=how)
        synchronise(self.loaded.device)
        seconds = [planned.seconds or 0.0 for planned, _ in batch]
        calls = self.executor.calls[before:]
        gaps = [later.started - earlier.ended for earlier, later in zip(calls, calls[1:])]
        self.units.append(Unit(dict(context), time.perf_counter() - start, sum(seconds) / len(seconds), len(batch),
                               len(runs), statistics.median(gaps) if gaps else 0.0, host))


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass
