"""One planned run (the unpruned baseline, or a method at a ratio) on a batch of prepared samples: the
generation call and what each sample got from it.

On the default ``--decoding auto`` (``engine``) the batch goes through kvprune's generation engine
(``Executor.engine``: a ``kvprune.Generator``, kept for the model's lifetime so that compiled steps and decode states are
reused from batch to batch): each sample is prefilled on its own, then all rows decode together. The
engine's greedy tokens equal ``model.generate``'s (checked on every family's tiny model), so batch size
changes throughput, not answers (on a CPU in float32; a GPU in bfloat16 may differ at near ties, and the
report says how often). ``--decoding static`` or ``dynamic`` runs stock ``generate`` instead, one sample
per call, through the model's generating module (``LoadedModel.generating_module``). The sweep (``samples``) and
``kvprune estimate`` both call this, so an estimate times what a sweep runs.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch

from kvprune.generation import ENGINE, Generator, Timing, stock_generate, unpruned_split
from kvprune.models.loading import LoadedModel
from kvprune.press import Press

from ..setup.options import ENGINE_CACHE


@dataclass
class SampleOutput:
    """What one sample of a batch got: its answer, the placeholders its prefill kept of each modality
    in the press's scope (None: no press), its new tokens."""

    output: str
    kept: dict[str, int] | None
    new_tokens: int


@dataclass
class BatchGeneration:
    """A run on a batch: each sample's output, and the call's timing and engine record."""

    samples: list[SampleOutput]
    timing: Timing  # of the whole call: every prefill of the batch, then the joint decoding
    engine: str  # which path decoded: kvprune's engine, transformers.generate, or its fallback
    note: str = ""  # why the engine fell back, if it did
    graphs_captured: int = 0
    compilations: int = 0


class Executor:
    """Generates a batch under a press on one loaded model (see the module docstring)."""

    def __init__(self, loaded: LoadedModel, cache: str, presses=(), compile_prefill: bool | str = "auto"):
        """``presses``: what it will run (each method's press), so that the unpruned runs decode on the compiled
        step of the token presses' layout (``kvprune.generation.unpruned_split``); ``compile_prefill``: the engine's."""
        self.loaded, self.cache = loaded, cache
        split = unpruned_split(presses)
        self.engine = (Generator(loaded.model, split_unpruned_at=split, compile_prefill=compile_prefill)
                       if cache == ENGINE_CACHE else None)  # None: stock
        tokenizer = getattr(loaded.processor, "tokenizer", loaded.processor)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = getattr(loaded.generating_module.generation_config, "eos_token_id", None)
        self.eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)

    def generate(self, inputs: list[dict], press: Press | None, max_new_tokens: int,
                 answers: list[int] | None = None, batch_size: int | None = None) -> BatchGeneration:
        """``inputs`` (one sample each) under ``press``; ``answers``: each row's answer length in tokens, its
        end included, where the model is not to end its answers itself (random weights never do): the call
        then decodes as long as it would had each row ended there, and each row's answer is cut there.
        ``batch_size``: the pass's, which a smaller batch (a task's last) decodes at, its other rows idle, on the
        full batches' compiled step (``Generator.generate``'s ``decode_rows``)."""
        if self.engine is None:
            return self._stock(inputs, press, max_new_tokens, answers)
        _reset_peak(self.engine.device)
        stops = {} if answers is None else dict(eos_token_id=[])
        tokens = max_new_tokens if answers is None else self.engine.tokens_generated(max(answers), max_new_tokens)
        out = self.engine.generate(inputs, max_new_tokens=tokens, press=press, pad_token_id=self.pad,
                                   decode_rows=batch_size, **stops)
        outcomes = out.outcome if isinstance(out.outcome, list) else [out.outcome]  # one per sample: each is its own batch
        kept = [_kept(outcome) for outcome in outcomes]
        rows = list(out.new_tokens) if answers is None else [row[:n] for row, n in zip(out.new_tokens, answers)]
        samples = [SampleOutput(self.loaded.decode(row[None]), k, self._length(row) if answers is None else len(row))
                   for row, k in zip(rows, kept)]
        # the run's cache is the engine even where it fell back to stock generate (``engine`` says so)
        timing = replace(out.timing, peak_memory_bytes=_peak(self.engine.device), cache=ENGINE_CACHE)
        engine = ENGINE if out.engine == ENGINE else f"{ENGINE} fell back to {out.engine}"
        return BatchGeneration(samples, timing, engine, out.note, out.graphs_captured, out.compilations)

    def _stock(self, inputs: list[dict], press: Press | None, max_new_tokens: int,
               answers: list[int] | None) -> BatchGeneration:
        """Stock ``generate``, one sample per call (the batch's timing is the sum of its calls); with
        ``answers``, each call generates exactly its row's (``min_new_tokens``: no end before)."""
        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=self.pad)
        if self.cache == "static":
            kwargs["cache_implementation"] = "static"  # generate compiles the decode step on a GPU
        samples, timings = [], []
        for index, sample_inputs in enumerate(inputs):
            forced = {} if answers is None else dict(max_new_tokens=answers[index], min_new_tokens=answers[index])
            _reset_peak(self.loaded.device)
            with press(self.loaded.model) if press else nullcontext() as outcome:
                new_ids, timing = stock_generate(self.loaded.generating_module, sample_inputs, **{**kwargs, **forced})
            timing = replace(timing, peak_memory_bytes=_peak(self.loaded.device))
            samples.append(SampleOutput(self.loaded.decode(new_ids), _kept(outcome), self._length(new_ids[0])))
            timings.append(timing)
        return BatchGeneration(samples, Timing.of_calls(timings), "transformers.generate")

    def _length(self, row: torch.Tensor) -> int:
        """New tokens a row generated: up to and with its first end-of-sequence token, else all."""
        if self.eos:
            ended = torch.isin(row, torch.tensor(self.eos, device=row.device)).nonzero()
            if len(ended):
                return int(ended[0]) + 1
        return int(row.shape[0])


def _reset_peak(device: torch.device) -> None:
    """Start the device's peak-memory count afresh, for ``_peak`` after the call (the generation calls leave it alone)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int | None:
    """The device memory allocated at its peak since ``_reset_peak`` (None on a CPU, where it is not tracked)."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def _kept(outcome) -> dict[str, int] | None:
    """The placeholders kept per modality of the press's scope, over the outcome's rows."""
    if outcome is None or not outcome.stats:
        return None
    kept: dict[str, int] = {}
    for row in outcome.kept_by_modality():
        for modality, count in row.items():
            kept[modality] = kept.get(modality, 0) + count
    return kept
