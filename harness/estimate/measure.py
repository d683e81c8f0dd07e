"""What one sample-run costs on this device, in the three ways ``kvprune estimate`` compares:

* ``batch1``: kvprune's own one-at-a-time path: fast audio encoder, the generation engine (compiled
  decode replayed as a CUDA graph on a GPU), one sample per call, nothing shared between runs;
* ``sweep``: the sweep's settings: ``--batch-size`` samples per call through the same engine, each
  sample's audio encoder output reused by every run after the first (``--no-reuse-encoder``: not);
* ``audiomarathon``: AudioMarathon's way, for reference: the stock audio encoder and stock
  ``generate`` on its dynamic cache, one sample per call.

Each is timed on real prompts (a task's own samples when its data is there) or on prompts of the
model's real architecture at lengths spread over the task's published range, decoding
``decode_tokens`` tokens; a run's cost for an answer of ``n`` tokens is its prefill plus ``n - 1``
decoding steps at the measured per-step time (random weights never stop on their own, so the answer
length is the task's, see ``estimate``). A call that compiled or captured a graph is timed again, warm.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from kvprune import fast_audio_encoder, resolve_family
from kvprune.generation import Generator
from kvprune.generation.encoder_reuse import EncoderReuse, reuse_audio_encoder

from ..timing import timed_generate

MODES = ("batch1", "sweep", "audiomarathon")


@dataclass(frozen=True)
class Cost:
    """One run's cost per sample: its prefill and one decoding step, in seconds (a batch's, shared by its rows)."""

    prefill_s: float
    step_s: float
    rows: int = 1

    def parts(self, answer_tokens: int) -> tuple[float, float]:
        """Per sample: the prefill's seconds and the decoding's (``answer_tokens - 1`` steps)."""
        return self.prefill_s / self.rows, max(0, answer_tokens - 1) * self.step_s / self.rows


class Timer:
    """Times runs (a press, or None for the unpruned one) on prompts of one model."""

    def __init__(self, model, decode_tokens: int, batch_size: int, reuse_encoder: bool, compile: bool | None = None):
        self.model, self.decode_tokens = model, decode_tokens
        self.batch_size, self.reuse_encoder = batch_size, reuse_encoder
        self.generator = Generator(model, compile="auto" if compile is None else compile)
        self.audio_token = resolve_family(model).audio_token_id(model)
        self.reuse = EncoderReuse()

    def batch1(self, inputs: dict, press) -> Cost:
        with fast_audio_encoder(self.model):
            return self._engine([inputs], press, reuse=False)

    def sweep(self, batch: list[dict], press, first_of_batch: bool) -> Cost:
        """One run of the sweep on ``batch``: the batch's first run computes the encoder outputs the
        later ones reuse (``first_of_batch`` clears what an earlier batch left)."""
        if first_of_batch:
            self.reuse.clear()
        with fast_audio_encoder(self.model):
            return self._engine(batch, press, reuse=self.reuse_encoder)

    def audiomarathon(self, inputs: dict, press) -> Cost:
        kwargs = dict(max_new_tokens=self.decode_tokens, min_new_tokens=self.decode_tokens, do_sample=False,
                      suppress_tokens=[self.audio_token], pad_token_id=0)
        with torch.no_grad(), press(self.model) if press is not None else nullcontext():
            _, timing = timed_generate(self.model, inputs, **kwargs)
        return Cost(timing.prefill_s, timing.decode_s / max(1, timing.new_tokens - 1))

    def _engine(self, batch: list[dict], press, reuse: bool) -> Cost:
        def call():
            with reuse_audio_encoder(self.model, self.reuse) if reuse else nullcontext():
                return self.generator.generate(batch, max_new_tokens=self.decode_tokens, press=press, eos_token_id=[],
                                               suppress_tokens=[self.audio_token], pad_token_id=0)

        hits = self.reuse.hits
        out = call()
        if out.compilations or out.graphs_captured:  # compiling or capturing: time it again, warm
            if reuse and self.reuse.hits == hits:  # the cold call computed the encoder: so does the timed one
                self.reuse.clear()
            out = call()
        steps = max(1, out.new_tokens.shape[1] - 1)
        return Cost(out.timing.prefill_s, out.timing.decode_s / steps, rows=len(batch))

    def compile_record(self) -> dict:
        from kvprune.generation.graphs import compile_counters

        graphs, recompiles = compile_counters()
        return dict(compile_graphs=graphs, recompiles=recompiles, cuda_graphs=self.generator.captures,
                    decode_states=self.generator.states, decode_state_bytes=self.generator.state_bytes,
                    fallbacks=self.generator.fallbacks, engine_unsupported=self.generator.unsupported)

