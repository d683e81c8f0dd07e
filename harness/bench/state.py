"""What one ``kvprune bench`` run carries from preset to preset: its device and dtype, the meter that
times its requests, its deadline, its progress bar, the rows so far and every timed round behind them."""

from __future__ import annotations

import math
import time

import torch
from tqdm.auto import tqdm

from kvprune.generation import Generator, unpruned_split
from kvprune.generation.prefill import prefill_layers_way

from ..setup.device import default_device, release_memory, resolve_cache
from .config import BenchConfig
from .measure import Meter


class BenchState:
    """State of one bench run: device, meter, deadline, progress bar, the rows so far and their rounds."""

    def __init__(self, config: BenchConfig):
        self.config = config
        self.device = torch.device(config.device or default_device())
        auto = "bfloat16" if self.device.type == "cuda" else "float32"
        self.dtype = getattr(torch, auto if config.dtype == "auto" else config.dtype)
        self.meter = Meter(self.device, config.warmup, config.repeats, config.compile, config.compile_config)
        self.cache = resolve_cache(config.cache, self.device)
        self.deadline = math.inf if config.max_minutes is None else time.monotonic() + 60 * config.max_minutes
        # shown once work has started (a run refused up front draws nothing); one count per audio length
        self.bar = tqdm(total=0, disable=not config.progress, unit="request", dynamic_ncols=True, delay=1)
        self.rows: list[dict] = []
        self.rounds: list[dict] = []  # one per request and timed round (``rounds.round_rows``)
        self._engines: dict[int, Generator] = {}

    def engine(self, model) -> Generator:
        """The generation engine of ``model``, kept while the model is benchmarked (its compiled step and
        decode states serve every request of every round; each request decodes in a state of its own shape, not in
        a larger one another request left, so that a row times its own layout's decoding)."""
        if id(model) not in self._engines:
            self._engines.clear()  # another model: the last one is gone
            split = unpruned_split(self.config.presses.values())  # the unpruned rows decode on the presses' step
            self._engines[id(model)] = Generator(model, compile=self.meter.compile, split_unpruned_at=split, state_room=1,
                                                 compile_prefill=self.config.compile_prefill)
        return self._engines[id(model)]

    def prefill_compiled(self) -> bool:
        """Whether the engine of the model being benchmarked runs its prefills' decoder layers >= K compiled (asked, and
        they did not fail to compile)."""
        return any(prefill_layers_way(engine.module) == "compiled" for engine in self._engines.values())

    def forget_engines(self) -> None:
        self._engines.clear()

    def free_memory(self) -> None:
        """Give the device back what the engine keeps between requests (its decode states and their graphs)
        and what the allocator caches."""
        for engine in self._engines.values():
            engine.forget_states()
        release_memory()

    def expired(self) -> bool:
        return time.monotonic() > self.deadline
