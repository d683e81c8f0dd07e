"""What the bench times at one audio length, and how: requests run in interleaved rounds, summarised
with medians after an outlier rule.

Every request (unpruned, the ideal at each ratio, each press at each ratio, the stock baselines)
runs once per round, starting one place later each round, so that slow drift (the card's clocks,
the host's load) spreads over all of them instead of biasing whichever ran in a bad minute.
``warmup`` rounds come first and are not counted; they also absorb compilation.

Outliers: every request runs the same audio encoder on the same features, so a round whose encoder
time is far from the encoder's usual time (more than 3 median absolute deviations and 5% from the
median of all requests' rounds on that encoder path and batch size) caught the device disturbed,
and that round of that request is left out, as long as at least half of its rounds remain. What
the medians then compare, besides the whole prefill, is its LLM part (prefill minus its own encoder
time, per round), which an encoder outlier cannot move. A round whose LLM part took more than
``STALL_FACTOR`` times the request's fastest round stalled (the same work on the same inputs: the host
stopped, for a second or more, between two launches) and is left out too, under the same limit; in batch
mode such a stall of the one prefill would count once per row (H100, 2026-12-06: one round of FastV at
16 rows read 27.7 s against 1.4 s, its median of two rounds 14.6 s).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from kvprune.press import Press

from .measure import RequestTiming

GIB = 2.0**30
SKIPPED = "skipped: --max-minutes reached"
WARMED_ONLY = (f"{SKIPPED} after its warm-up rounds (which compile), before its first timed one: give more minutes "
               "(--max-minutes) or fewer warm-up rounds (--warmup)")
MAD_SIGMA = 1.4826  # median absolute deviation -> standard deviation, for normal noise
STALL_FACTOR = 3.0  # a round's LLM part this many times its request's fastest: stalled (a slow host gives up to ~2x)


@dataclass(frozen=True)
class Request:
    """One configuration timed in the rounds."""

    method: str  # "none" (kvprune, unpruned), "ideal", "stock" (Hugging Face alone) or a method label
    ratio: float
    kind: str  # none, ideal, stock, or the press's kind: token, cache, composed
    press: Press | None = None
    keep: int | None = None  # the ideal: the prompt positions layers >= K run on
    drop_ratio: float | None = None  # the fraction of audio tokens dropped before layer K (token presses, ideal)
    cache: str = "dynamic"  # dynamic or static (stock generate's, or the forward path's), or engine (kvprune's)
    encoder: str = "fast"  # fast (kvprune.fast_audio_encoder) or stock
    batch: int = 1
    generate: bool = False  # a whole generate call instead of prefill + forced decoding

    @property
    def decodes(self) -> bool:
        return self.kind != "ideal"  # the ideal is a prefill bound: its cache is not decoded


@dataclass
class Outcome:
    """A request's timed rounds (or the error that stopped it) and what its prefills kept."""

    samples: list[RequestTiming]
    kept_tokens: int | None = None
    error: str | None = None


def run_rounds(requests: list[Request], rounds: int, warmup: int, *, run_one: Callable[[Request], tuple],
               expired: Callable[[], bool], describe: Callable[[Exception], str], on_round=None) -> dict[Request, Outcome]:
    """Run every request once per round (``run_one(request) -> (RequestTiming, kept tokens)``); the
    first ``warmup`` rounds are not kept. A request that raises is not run again: its error is kept.
    Past the deadline (``expired``) no request starts: the rounds already timed are what the medians
    use, and only a request with no timed round at all is reported skipped."""
    outcomes = {request: Outcome([]) for request in requests}
    warmed = set()  # requests that ran at least once (a warm-up round, say)
    for round_ in range(rounds):
        if expired():
            break
        if on_round is not None:
            on_round(round_)
        shift = round_ % max(1, len(requests))
        for request in requests[shift:] + requests[:shift]:
            outcome = outcomes[request]
            if outcome.error is not None:
                continue
            if expired():
                break
            try:
                timing, kept = run_one(request)
            except Exception as error:
                outcome.error = describe(error)
                continue
            outcome.kept_tokens = kept
            warmed.add(request)
            if round_ >= warmup:
                outcome.samples.append(timing)
    for request, outcome in outcomes.items():
        if outcome.error is None and not outcome.samples:
            outcome.error = (WARMED_ONLY if request in warmed else SKIPPED) if expired() else "no timed round"
    return outcomes


def disturbed(outcomes: dict[Request, Outcome]) -> dict[Request, list[bool]]:
    """Per request and timed round, whether its encoder time marks the round as disturbed, or its LLM part as
    stalled (see the module's docstring); never more than half of a request's rounds."""
    pools: dict[tuple, list[float]] = {}
    for request, outcome in outcomes.items():
        pools.setdefault((request.encoder, request.batch), []).extend(
            s.encoder_ms for s in outcome.samples if not math.isnan(s.encoder_ms)
        )
    flags = {}
    for request, outcome in outcomes.items():
        pool = pools[request.encoder, request.batch]
        encoder = [False] * len(outcome.samples)
        if len(pool) >= 3:
            centre = statistics.median(pool)
            limit = max(3 * MAD_SIGMA * statistics.median(abs(x - centre) for x in pool), 0.05 * centre)
            encoder = [abs(s.encoder_ms - centre) > limit for s in outcome.samples]
        either = [e or s for e, s in zip(encoder, stalled(outcome.samples))]
        flags[request] = next((f for f in (either, encoder) if sum(f) <= len(f) // 2), [False] * len(encoder))
    return flags


def stalled(samples: list[RequestTiming]) -> list[bool]:
    """Per round, whether its LLM part took more than ``STALL_FACTOR`` times the fastest round's."""
    finite = [s.llm_ms for s in samples if not math.isnan(s.llm_ms)]
    fastest = min(finite) if len(finite) >= 2 else math.inf
    return [s.llm_ms > STALL_FACTOR * fastest for s in samples]


def summary(outcome: Outcome, dropped: list[bool]) -> dict:
    """A request's row fields: medians over its kept rounds, the LLM part's spread, the largest peak."""
    if outcome.error is not None:
        return {"error": outcome.error}
    kept = [s for s, out in zip(outcome.samples, dropped) if not out]

    def median(name: str) -> float:
        values = [getattr(s, name) for s in kept]
        values = [v for v in values if not math.isnan(v)]
        return statistics.median(values) if values else math.nan

    llm = [s.llm_ms for s in kept if not math.isnan(s.llm_ms)]
    last = kept[-1]
    return dict(
        prefill_ms=median("prefill_ms"),
        layers_ms=median("layers_ms"),
        encoder_ms=median("encoder_ms"),
        llm_ms=statistics.median(llm) if llm else math.nan,
        llm_noise_ms=spread(llm),
        head_ms=median("head_ms"),
        score_ms=median("score_ms"),
        host_lead_encoder_ms=median("host_lead_encoder_ms"),
        host_lead_k_ms=median("host_lead_k_ms"),
        host_lead_end_ms=median("host_lead_end_ms"),
        host_loop_ns=median("host_loop_ns"),
        decode_ms_per_token=median("decode_ms_per_token"),
        request_ms=median("request_ms"),
        peak_gib=max(s.peak_bytes for s in kept) / GIB,
        kv_bytes=last.kv_bytes,
        kv_alloc_bytes=last.kv_alloc_bytes,
        cache=last.cache,
        compiled_in_timing=any(s.compiled for s in kept),
        decode_fell_back=any(s.decoded_uncompiled for s in kept),
        prefill_fell_back=any(s.prefill_uncompiled for s in kept),
        rounds=len(kept),
        dropped_rounds=len(outcome.samples) - len(kept),
        kept_tokens=outcome.kept_tokens,
    )


def over_ideal_by_round(requests: list[Request], outcomes: dict[Request, Outcome],
                        dropped: dict[Request, list[bool]]) -> dict[Request, dict]:
    """Per press that drops tokens before layer K, its time over its ideal's within each timed round that kept both,
    summarised as row fields (median, spread and count): to the last decoder layer's end (``layers_vs_ideal_paired``:
    the span both run, the ideal's prefill stopping at its forward's end where the engine's then chooses the first
    token and loads its decode state) and the whole prefill (``prefill_vs_ideal_paired``). The two ran seconds apart,
    so a host that slows for a minute slows both and the ratio cancels it, where a ratio of two medians can set a
    press's slow round against its ideal's fast one (a GPU host's launch speed moves by 1.5x from minute to minute)."""
    ideals = {(r.batch, r.drop_ratio): r for r in requests if r.kind == "ideal"}
    fields = {}
    for request in requests:
        ideal = ideals.get((request.batch, request.drop_ratio)) if request.kind in ("token", "composed") else None
        if ideal is None or outcomes[request].error is not None or outcomes[ideal].error is not None:
            continue
        pairs = zip(outcomes[request].samples, dropped[request], outcomes[ideal].samples, dropped[ideal])  # by round
        kept = [(press, bound) for press, out, bound, out_too in pairs if not (out or out_too)]
        if not kept:
            continue
        row = dict(paired_rounds=len(kept))
        for name, span in (("prefill", "prefill_ms"), ("layers", "layers_ms")):
            ratios = [getattr(press, span) / getattr(bound, span) for press, bound in kept]
            ratios = [r for r in ratios if not math.isnan(r)]
            row[f"{name}_vs_ideal_paired"] = statistics.median(ratios) if ratios else math.nan
            row[f"{name}_vs_ideal_paired_noise"] = spread(ratios) if ratios else math.nan
        fields[request] = row
    return fields


#: what ``round_rows`` keeps of each timed round
ROUND_FIELDS = ("prefill_ms", "layers_ms", "encoder_ms", "llm_ms", "host_lead_encoder_ms", "host_lead_k_ms", "host_lead_end_ms",
                "host_loop_ns", "decode_ms_per_token")


def round_rows(requests: list[Request], outcomes: dict[Request, Outcome], dropped: dict[Request, list[bool]],
               warmup: int) -> list[dict]:
    """One row per request and timed round, in the order they ran, with its place in that round (the order
    turns one place a round): what a median hides, e.g. one request slow in every round, or every request in
    one round."""
    rows = []
    for index, request in enumerate(requests):
        for timed, (sample, out) in enumerate(zip(outcomes[request].samples, dropped[request])):
            round_ = warmup + timed  # a request runs in every round until it fails or time runs out
            rows.append(dict(method=request.method, ratio=request.ratio, batch=request.batch, round=timed + 1,
                             place=(index - round_) % len(requests) + 1, dropped=out,
                             **{name: getattr(sample, name) for name in ROUND_FIELDS}))
    return sorted(rows, key=lambda row: (row["round"], row["place"]))


def spread(values: list[float]) -> float:
    """Round-to-round noise of a median: the median absolute deviation, scaled to a standard deviation."""
    if len(values) < 2:
        return 0.0
    centre = statistics.median(values)
    return MAD_SIGMA * statistics.median(abs(v - centre) for v in values)
