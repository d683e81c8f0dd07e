"""What a bench mode adds to the timed rows of one audio length: the cost of scoring (ratios mode), the
FLOPs of the audio encoder (ratios and compare modes), how close kvprune's audio encoder comes to the
stock one's output (compare mode), and the largest batch that fits (batch mode with ``--largest-batch``).
Each records its own failure without losing the rows."""

from __future__ import annotations

import math
import sys
from contextlib import nullcontext
from dataclasses import replace

import torch

from kvprune import fast_audio_encoder, resolve_family
from kvprune.compiling import out_of_memory

from ..setup.device import release_memory
from ..setup.options import ENGINE_CACHE
from . import batch as batching
from .measure import takes_logits_to_keep
from .presets import Preset, Prompt
from .requests import describe, failed, run_request
from .roofline import decode_step_work, encoder_span_flops
from .rounds import GIB
from .scoring import ScoringInputs, eager_matrix_cost, last_row_ms
from .state import BenchState


def scoring_costs(state: BenchState, model, prompt: Prompt) -> dict:
    """AudioMarathon's eager attention matrix against kvprune's last-row scores, at layer K-1. If
    they fail (e.g. the matrix does not fit), the unpruned row still counts, with the error."""
    if state.expired():
        return {}
    try:
        scoring = ScoringInputs.for_model(model, state.config.k, prompt.inputs["input_ids"], state.config.seed)
        eager = eager_matrix_cost(state.meter, model, state.config.k, scoring)
        return dict(
            eager_score_ms=eager.extra_ms,
            eager_score_extra_gib=eager.extra_bytes / GIB,
            last_row_score_ms=last_row_ms(state.meter, scoring),
        )
    except Exception as error:
        return {"error": f"scoring costs: {failed(error)}"}


@torch.no_grad()
def encoder_agreement(state: BenchState, model, prompt: Prompt) -> dict:
    """Whether kvprune's audio encoder gives exactly the stock encoder's output on this prompt, and the largest
    |stock - fast| over the largest |stock| (None and NaN: not checked, for lack of time or because it failed)."""
    unchecked = dict(encoder_identical=None, encoder_max_rel_diff=math.nan)
    if state.expired():
        return unchecked
    try:
        stock, fast = _encoder_outputs(model, prompt)
        difference = float((stock.float() - fast.float()).abs().max())
        return dict(encoder_identical=torch.equal(stock, fast),
                    encoder_max_rel_diff=difference / max(float(stock.float().abs().max()), 1e-30))
    except Exception:
        release_memory()
        return unchecked


def _encoder_outputs(model, prompt: Prompt) -> tuple[torch.Tensor, torch.Tensor]:
    end = resolve_family(model).audio_encoder(model)[1]
    outputs = []
    handle = end.register_forward_hook(
        lambda module, args, output: outputs.append(output if isinstance(output, torch.Tensor) else output[0])
    )
    try:
        for fast in (False, True):
            with fast_audio_encoder(model) if fast else nullcontext():
                model(**prompt.inputs, use_cache=False, **({"logits_to_keep": 1} if takes_logits_to_keep(model) else {}))
    finally:
        handle.remove()
    return outputs[0], outputs[1]


def encoder_flops(state: BenchState, model, prompt: Prompt) -> float:
    """The FLOPs of the span the rows time as the audio encoder (``roofline.encoder_span_flops``; NaN: not
    counted, for lack of time or because counting failed, which is said on stderr: the report then shows no
    floor for the encoder)."""
    if state.expired():
        print("kvprune bench: the audio encoder's FLOPs not counted (--max-minutes reached)", file=sys.stderr)
        return math.nan
    try:
        return float(encoder_span_flops(model, prompt.inputs))
    except Exception as error:
        release_memory()
        print(f"kvprune bench: the audio encoder's FLOPs not counted: {describe(error)}", file=sys.stderr)
        return math.nan


def decode_step(model, row: dict) -> dict:
    """A batch-mode row's decode step as work: its matrix FLOPs and bytes (``roofline.decode_step_work``) at
    the row's batch size and cache (NaN where the row has no cache size: it failed)."""
    kv_bytes = row.get("kv_bytes")
    if kv_bytes is None or math.isnan(kv_bytes):
        return dict(step_flops=math.nan, step_bytes=math.nan)
    flops, nbytes = decode_step_work(model, int(row["batch"]), kv_bytes)
    return dict(step_flops=flops, step_bytes=nbytes)


def largest_batches(state: BenchState, model, preset: Preset, base: dict, *, requests, outcomes, prompts, rows) -> None:
    """Per configuration, the largest batch that fits (CUDA only): predicted from the measured
    batches, then run (see ``bench.batch``); the run that fits gives the throughput at that batch."""
    if not state.meter.cuda:
        for row in rows:
            row.update(max_batch_predicted=math.nan, max_batch=math.nan)
        return
    configurations: dict[tuple, dict[int, object]] = {}
    for request in requests:
        outcome = outcomes[request]
        if outcome.samples:
            key = (request.method, request.ratio)
            configurations.setdefault(key, {})[request.batch] = max(
                outcome.samples, key=lambda s: s.peak_bytes - s.base_bytes + s.reused_bytes)
    found = {}
    for (method, ratio), samples in configurations.items():
        request = next(r for r in requests if (r.method, r.ratio) == (method, ratio))
        engine = request.cache == ENGINE_CACHE  # one prompt for every row: its inputs count once
        inputs = {b: prompts[1 if engine else b].input_bytes for b in samples}
        per_row, per_request = batching.row_bytes(samples, inputs)
        state.free_memory()  # the rounds' kept decode states give their memory to the search
        fixed = torch.cuda.memory_allocated(state.device) + per_request
        predicted = batching.predicted_batch(per_row, fixed, batching.allocatable_bytes(state.device))
        timed, tries = {}, []

        def fits(size: int, request=request) -> bool:
            if state.expired():
                tries.append(f"{size}: not tried (--max-minutes)")
                return False
            state.free_memory()  # what the last try kept (a size that ran keeps its decode state)
            try:
                prompt = preset.prompt(model, base["audio_seconds"], state.config.decode_tokens, state.config.seed,
                                       1 if engine else size)
                for _ in range(2):  # the first compiles and captures the new batch size's step: the second is timed
                    timed[size] = run_request(state, model, prompt, replace(request, batch=size))[0]
                tries.append(f"{size}: ran")
                return True
            except Exception as error:
                if not out_of_memory(error):
                    raise
                tries.append(f"{size}: out of memory")
            return False

        try:
            largest = batching.largest_fitting(predicted, fits)
            found[method, ratio] = (predicted, largest, timed.get(largest), "; ".join(tries))
        except Exception as error:  # not a lack of memory: the search stops, the rows stay
            found[method, ratio] = (predicted, math.nan, None, "; ".join(tries))
            for row in rows:
                if (row["method"], row["ratio"]) == (method, ratio) and row.get("error") is None:
                    row["error"] = f"largest batch: {describe(error)}"
        release_memory()
    for row in rows:
        predicted, largest, timing, tried = found.get((row["method"], row["ratio"]), (math.nan, math.nan, None, ""))
        row.update(max_batch_predicted=predicted, max_batch=largest, max_batch_tries=tried,
                   **_largest_batch_step(model, largest, timing), **batching.throughput_at(timing, largest))


def _largest_batch_step(model, largest, timing) -> dict:
    """The largest batch's decode step: its time, its work (``roofline.decode_step_work``) and its keys' and values'
    bytes (NaN where no size ran)."""
    if timing is None:
        return dict.fromkeys(["max_batch_step_ms", "max_batch_step_flops", "max_batch_step_bytes", "max_batch_kv_bytes"],
                             math.nan)
    flops, nbytes = decode_step_work(model, largest, timing.kv_bytes)
    return dict(max_batch_step_ms=timing.decode_ms_per_token, max_batch_step_flops=flops, max_batch_step_bytes=nbytes,
                max_batch_kv_bytes=timing.kv_bytes)
