"""``kvprune bench --compare-stock``: what a user gets from stock Hugging Face against kvprune, in one
run per preset and audio length, and the targets of that comparison.

Rows (whole calls of ``--decode-tokens`` new tokens): stock HF unpruned on its dynamic cache; stock
HF unpruned with its static-cache compile (the best a user gets without kvprune); kvprune unpruned
(fast audio encoder, kvprune's generation engine: on a GPU a compiled decode step replayed as a
CUDA graph); kvprune with each method at each ratio (the same); and the ideal at each ratio
(prefill only). The targets are ratios against the
stock rows of the same run; each comes with the bound the measurement itself sets: what the ideal
would give, and the floor no pruning ratio can go below (kvprune's encoder, embedding and layers < K,
timed inside kvprune's unpruned prefill).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

TARGET_RATIO = 0.9
DECODE_MS = 6.0
PREFILL_OVER_IDEAL = 1.10  # a pruned prefill within 10% of its ideal
#: a press is below its ideal when it is faster by more than twice the rounds' spread and more than this fraction
#: of the ideal (its LLM part's medians; round by round, its ratios to the last layer's end)
BELOW_IDEAL_FLOOR = 0.01
#: why a run's ideal bounds nothing: the pruned prefill below it beyond the rounds' spread, or its own
#: rounds spread wider than the tolerance the target allows (either way: more --repeats)
BELOW_IDEAL = " (below its ideal beyond the rounds' spread: this run's ideal is no bound; more --repeats)"
NOISY_IDEAL = " (the ideal's rounds spread by {:.1f} ms, beyond the {:.0%} the target allows; more --repeats)"
NOISY_PAIRS = " (its round-by-round ratios spread by {:.1%}, beyond the {:.0%} the target allows; more --repeats)"
#: rounds in which both the press and its ideal were kept, for the target to be judged round by round
PAIRED_ROUNDS = 3
#: a host lead below this at the last layer's end: the pruned prefill ended waiting for the host's launches
HOST_BOUND_MS = 1.0
#: a host-bound press whose host loop was this much slower than its ideal's was timed at another host speed
SLOWER_HOST = 1.2
#: a request (prefill + the decoded tokens) at ``TARGET_RATIO`` against stock HF with its dynamic cache, and with its
#: static-cache compile (every family; Qwen2.5-Omni sets its own, higher, static one)
REQUEST_SPEEDUP_DYNAMIC, REQUEST_SPEEDUP_STATIC = 3.0, 2.0


@dataclass(frozen=True)
class SpeedTargets:
    """One family's targets against stock Hugging Face at 5 min of audio: its audio encoder ``encoder`` times
    faster (its output bit-identical where ``exact``; its time within ``within_floor`` times its FLOP floor
    where set), the prefill at ``TARGET_RATIO`` ``prefill`` times faster than stock unpruned, and a request
    there ``request_static`` times faster than stock's static-cache compile."""

    encoder: float
    prefill: float
    exact: bool = False
    within_floor: float | None = None
    request_static: float = REQUEST_SPEEDUP_STATIC


WHISPER_STYLE = SpeedTargets(encoder=1.8, prefill=1.8, within_floor=1.3)
#: family -> its targets (a family not listed has none for its encoder and prefill)
TARGETS = {
    "qwen2_5_omni": SpeedTargets(encoder=4.0, prefill=4.0, exact=True, request_static=2.5),
    "voxtral": WHISPER_STYLE,
    "aero": WHISPER_STYLE,
    "phi4_multimodal": SpeedTargets(encoder=1.6, prefill=2.2),
}


def prefill_words(row) -> str:
    """That a row's prefill layers >= K were to run compiled (``--compile-prefill``) but failed to compile, or nothing."""
    return ", prefill layers >= K uncompiled (they failed to compile)" if row.get("prefill_fell_back") is True else ""


def compiled_words(row, compiled: str) -> str:
    """How a row decoded: ``compiled`` if it did, or that its step failed to compile, or nothing; then
    ``prefill_words``."""
    if row["decode_compiled"] is not True:
        return prefill_words(row)
    return (", decoding uncompiled (its step failed to compile)" if row.get("decode_fell_back") is True else compiled) + prefill_words(row)


def variant(row) -> str:
    """What a compare row is, in words."""
    cache = f"{row['cache']} cache" + compiled_words(row, ", compiled")
    if row["method"] == "stock":
        return f"stock HF, {cache}"
    encoder = f"{row['encoder']} encoder"
    if row["method"] == "ideal":
        return f"ideal {row['ratio']:g} ({encoder}, prefill only{prefill_words(row)})"
    name = "kvprune unpruned" if row["method"] == "none" else f"kvprune {row['method']} {row['ratio']:g}"
    return f"{name}, {encoder}, {cache}"


def _one(rows: pd.DataFrame, **match) -> pd.Series | None:
    picked = rows
    for column, value in match.items():
        picked = picked[picked[column] == value]
    return None if picked.empty else picked.iloc[0]


def _times(value: float) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.2f}×"


def _met(value: float, goal: float, higher: bool = True) -> str:
    if value is None or math.isnan(value):
        return "not measured"
    return "met" if (value >= goal if higher else value <= goal) else "missed"


def _host_bound(press, ideal) -> str:
    """What the host let the pruned prefill reach: the host's lead at its last layer's end and the host's speed
    before its requests, the ideal's beside each (a press that met a slower host than its ideal did is compared
    across host speeds); a prefill that ended waiting for launches follows the host, which varies from host to host and
    within minutes on one (a GPU's marks only: on a CPU the host's clock is the device's)."""
    lead = press.get("host_lead_end_ms", math.nan)
    if str(press.get("device", "cpu")).startswith("cpu") or math.isnan(lead):
        return "—"
    ideal = ideal if ideal is not None else {}
    ideal_lead, ideal_loop = ideal.get("host_lead_end_ms", math.nan), ideal.get("host_loop_ns", math.nan)
    loop = press.get("host_loop_ns", math.nan)
    text = f"host lead at the last layer {lead:.1f} ms (the ideal's {ideal_lead:.1f})"
    if not math.isnan(loop):
        text += f", host loop {loop:.0f} ns" + (f" (the ideal's {ideal_loop:.0f})" if not math.isnan(ideal_loop) else "")
    if lead >= HOST_BOUND_MS:
        return text
    text += "; host-bound: follows the host's speed"
    if loop > SLOWER_HOST * ideal_loop:  # False when either is unknown
        text += ", slower before this press's requests than before the ideal's (rounds.csv: each round's)"
    return text


def targets(rows: pd.DataFrame, ratio: float = TARGET_RATIO) -> list[dict]:
    """The targets, per method at ``ratio``, from one preset and audio length's compare rows: a dict
    each with the target, its measured value, the bound the measurement allows, and whether it is met."""
    dynamic = _one(rows, method="stock", cache="dynamic")
    static = _one(rows, method="stock", cache="static")
    unpruned = _one(rows, method="none")
    ideal = _one(rows, method="ideal", ratio=ratio)
    if dynamic is None or unpruned is None:
        return []
    floor_ms = unpruned["head_ms"]
    goals = TARGETS.get(unpruned.get("family"))
    results = [_encoder_target(dynamic, unpruned, goals)] if goals is not None else []
    pressed = rows[(~rows["method"].isin(["stock", "none", "ideal"])) & (rows["ratio"] == ratio)]
    ideal_prefill = ideal["prefill_ms"] if ideal is not None else math.nan
    for _, press in pressed.iterrows():
        name = f"{press['method']} {ratio:g}"
        decode_total = press["request_ms"] - press["prefill_ms"]
        prefill = dynamic["prefill_ms"] / press["prefill_ms"]
        if goals is not None:
            results.append(dict(
                target=f"prefill at {name} ≥ {goals.prefill:g}× faster than stock HF unpruned",
                measured=_times(prefill),
                bound=f"ideal {_times(dynamic['prefill_ms'] / ideal_prefill)}; floor (encoder + layers < K) "
                      f"{_times(dynamic['prefill_ms'] / floor_ms)}",
                met=_met(prefill, goals.prefill),
            ))
        results.append(_within_ideal(name, press, ideal))
        results.append(dict(
            target=f"decode at {name} ≤ {DECODE_MS:g} ms per token at batch 1",
            measured=f"{press['decode_ms_per_token']:.2f} ms per token ({press['cache']} cache)",
            bound="—",
            met=_met(press["decode_ms_per_token"], DECODE_MS, higher=False),
        ))
        static_goal = goals.request_static if goals is not None else REQUEST_SPEEDUP_STATIC
        for baseline, goal, words in ((dynamic, REQUEST_SPEEDUP_DYNAMIC, "dynamic cache"),
                                      (static, static_goal, "static-cache compile")):
            if baseline is None:
                continue
            request = baseline["request_ms"] / press["request_ms"]
            results.append(dict(
                target=f"request (prefill + {int(press['decode_tokens'])} tokens) at {name} ≥ {goal:g}× faster than stock HF "
                       f"with its {words}",
                measured=_times(request),
                bound=f"with the ideal prefill {_times(baseline['request_ms'] / (ideal_prefill + decode_total))}",
                met=_met(request, goal),
            ))
    return results


def _within_ideal(name: str, press, ideal) -> dict:
    """The within-10%-of-its-ideal target, judged to the last decoder layer's end: the span the press's prefill and
    its ideal's both run (after its forward the engine chooses the first token and loads its decode state, which
    the ideal, a forward alone, does not; the whole prefill's ratio is given beside). Judged on the press's time
    over its ideal's within each round (drift of the host between rounds cancels; the ratio of the two medians
    beside it) where at least ``PAIRED_ROUNDS`` rounds pair up, else on the ratio of the medians. Not judged where
    the ideal bounds nothing: the press below it beyond the rounds' spread, or the ratios (or the ideal's rounds)
    spread wider than the tolerance."""
    ideal = ideal if ideal is not None else {}
    tolerance = PREFILL_OVER_IDEAL - 1
    span = ideal_span(press.get("layers_ms"), ideal.get("layers_ms"))
    ideal_ms = ideal.get(f"{span}_ms", math.nan)
    of_medians = press[f"{span}_ms"] / ideal_ms
    by_rounds = over_ideal_by_rounds(press, span)
    paired = by_rounds is not None
    if paired:
        over_ideal, spread = by_rounds
        below = below_by_rounds(over_ideal, spread)
        noisy = NOISY_PAIRS.format(spread, tolerance) if spread > tolerance else ""
    else:
        over_ideal = of_medians
        below = bool(press.get("below_ideal", False))
        spread_ms = ideal.get("llm_noise_ms", math.nan)
        noisy = NOISY_IDEAL.format(spread_ms, tolerance) if spread_ms > tolerance * ideal_ms else ""
    notes = [f"{of_medians:.3f}× of the medians"] if paired else []
    if span == "layers":
        whole = press["prefill_vs_ideal_paired"] if paired else press["prefill_ms"] / ideal.get("prefill_ms", math.nan)
        notes.append(f"the whole prefill {whole:.3f}×")
    measured = (f"{over_ideal:.3f}× the ideal" + (" to the last layer's end" if span == "layers" else "")
                + (", round by round" if paired else "") + (f" ({'; '.join(notes)})" if notes else ""))
    unbounded = BELOW_IDEAL if below else noisy
    return dict(
        target=f"prefill at {name} within {tolerance:.0%} of its ideal",
        measured=measured + unbounded,
        bound=_host_bound(press, ideal),
        met="not measured" if unbounded else _met(over_ideal, PREFILL_OVER_IDEAL, higher=False),
    )


def ideal_span(press_layers_ms, ideal_layers_ms) -> str:
    """What a press is judged against its ideal over: "layers" (to the last decoder layer's end) where both were
    timed there, else the whole "prefill"."""
    return "layers" if _finite(press_layers_ms) and _finite(ideal_layers_ms) else "prefill"


def over_ideal_by_rounds(press, span: str) -> tuple[float, float] | None:
    """The press's time over its ideal's within each round over ``span`` (their median, and their spread), where at
    least ``PAIRED_ROUNDS`` rounds pair up; None where they do not (judge by the medians)."""
    if press.get("paired_rounds", 0) >= PAIRED_ROUNDS and _finite(press.get(f"{span}_vs_ideal_paired")):
        return press[f"{span}_vs_ideal_paired"], press[f"{span}_vs_ideal_paired_noise"]
    return None


def below_by_rounds(over_ideal: float, spread: float) -> bool:
    """Below the ideal beyond twice the round-by-round ratios' spread (and ``BELOW_IDEAL_FLOOR``)."""
    return over_ideal < 1 - max(2 * spread, BELOW_IDEAL_FLOOR)


def _finite(value) -> bool:
    """A measured number (not missing, not NaN)."""
    return value is not None and not math.isnan(value)


def _encoder_target(dynamic, unpruned, goals: SpeedTargets) -> dict:
    """The audio encoder's target: its speed over stock's, how close its output is, and (where set) its time
    over its FLOP floor."""
    speedup = dynamic["encoder_ms"] / unpruned["encoder_ms"]
    identical, difference = unpruned.get("encoder_identical"), unpruned.get("encoder_max_rel_diff")
    identity = {True: "bit-identical", False: "NOT bit-identical"}.get(identical, "identity not checked")
    if not goals.exact and identical is False:
        identity = f"max relative difference {difference:.1e}"
    words, measured, met = [], [_times(speedup)], [_met(speedup, goals.encoder)]
    if goals.within_floor is not None:
        vs_floor = unpruned.get("encoder_vs_floor", math.nan)
        words.append(f"within {goals.within_floor:g}× its FLOP floor")
        measured.append(f"{vs_floor:.2f}× its floor")
        met.append(_met(vs_floor, goals.within_floor, higher=False))
    if goals.exact:
        words.append("bit-identical")
        met.append("missed: the outputs differ" if identical is False else "met")
    verdicts = [m for m in met if m != "met"]
    return dict(
        target=", ".join([f"audio encoder ≥ {goals.encoder:g}× faster than stock", *words]),
        measured=", ".join([*measured, identity]),
        bound=f"floor {unpruned.get('encoder_floor_ms', math.nan):.1f} ms (its FLOPs at the measured GEMM rate)",
        met=verdicts[0] if verdicts else "met",
    )
