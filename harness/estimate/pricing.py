"""From the calls and batches an estimate timed to what a whole task costs, in one way of running it.

Each timed call was repeated (``--repeats``); its figure is the median of its warm repeats (those
that neither compiled nor captured a graph, nor were the first of their run in the process) and its
spread their lowest and highest. What a cold repeat took beyond the warm median is a cost paid once:
a compilation or a run's first call (its lazy set-up: once per sweep, in the task where the sweep
meets it, as the estimate met it there), or a graph capture (once per decode state: the sweep meets about as
many states per task as the lengths of its batches span buckets, times the states its runs make for one prompt,
where the estimate timed only some runs: ``states_made``).

A run the estimate did not time (a ratio between its method's timed ones) costs what a line through
its method's timed ratios says (where layers < K are shared, through those that replayed them, not the
run that computed them for the others: ``payers``); a batch or sample not timed costs, per row, what a line through the
timed ones of the task says at its mean audio length (batches of the same size only). Each batch
adds its own work (preparing inputs, grading, writing rows: its wall time beyond its calls), and, for each
run the sweep makes that the timed batch did not, one run's share of it (the median gap between two of its
calls): a timed batch runs only the timed runs (on the demo a run's share is ~1 ms beside calls of 12-40 ms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvprune.generation import unpruned_split
from kvprune.generation.kept_states import ROOM, holds
from kvprune.generation.layer_reuse import shared_layers

from .timing import Call, Unit

BUCKETS_PER_OCTAVE = 8  # the engine's decode-state lengths (``Generator.per_octave``)
FIGURES = ("median", "low", "high", "prefill")


@dataclass
class ModeCost:
    """One task in one way of running it, in seconds (``low``/``high``: every call at its fastest/slowest repeat)."""

    total: float
    low: float
    high: float
    prefill: float  # of the calls, in their prefill
    decode: float  # of the calls, the rest of them (decoding, and setting it up)
    overhead: float  # batches' own work
    once: float  # compilations, graph captures, and each run's first call in the process (``lazy`` of it)
    units: int
    timed_units: int
    lazy: float = 0.0  # of ``once``: first calls that neither compiled nor captured (lazy set-up, paid at any batch size)
    graphs: float = 0.0  # CUDA graphs the task's captures are priced as: those met, scaled as their seconds are


def frames(calls: list[Call], units: list[Unit], task: str, mode: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    pick = lambda c: c.context["task"] == task and c.context["mode"] == mode  # noqa: E731
    call_rows = [dict(c.context, run=c.run, seconds=c.seconds, prefill_s=c.prefill_s,
                      cold=c.compiled or c.captured > 0 or c.first, once=c.compiled or c.first,
                      lazy=c.first and not c.compiled and not c.captured, rows=c.rows, captured=c.captured)
                 for c in calls if pick(c)]
    unit_rows = [dict(u.context, wall=u.seconds, audio_seconds=u.audio_seconds, size=u.size, runs=u.runs,
                      between_runs=u.between_runs) for u in units if pick(u)]
    return pd.DataFrame(call_rows), pd.DataFrame(unit_rows)


def call_figures(calls: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (unit, run): median, low, high and prefill seconds of its warm repeats; and what its cold
    repeats took beyond that, as compilation or capture."""
    def figures(group: pd.DataFrame) -> pd.Series:
        warm = group[~group["cold"]] if (~group["cold"]).any() else group
        return pd.Series(dict(median=warm["seconds"].median(), low=warm["seconds"].min(), high=warm["seconds"].max(),
                              prefill=warm["prefill_s"].median()))

    table = calls.groupby(["unit", "run"]).apply(figures, include_groups=False)
    cold = calls[calls["cold"]].join(table["median"], on=["unit", "run"])
    cold = cold.assign(extra=(cold["seconds"] - cold["median"]).clip(lower=0))
    return table, cold


def mode_cost(calls: pd.DataFrame, units: pd.DataFrame, runs: list, every_unit: list[tuple[float, int]],
              paying: set[int] = frozenset(), room: float = ROOM) -> ModeCost:
    """What every unit of the task (``every_unit``: (mean audio seconds, size) of each) costs under
    every run, from the timed units and runs (see the module docstring); ``paying``: the runs that
    compute layers < K for the others (``payers``); ``room``: the engine's ``state_room``."""
    table, cold = call_figures(calls)
    per_unit = {}
    for unit, group in table.groupby(level="unit"):
        measured = {run: group.loc[(unit, run)] for run in group.index.get_level_values("run")}
        per_unit[unit] = np.sum([_run_figures(measured, runs, i, paying) for i in range(len(runs))], axis=0)
    called = calls.groupby(["unit", "repeat"])["seconds"].sum()
    by_repeat = units.set_index(["unit", "repeat"])
    untimed = (len(runs) - by_repeat["runs"]).clip(lower=0) * by_repeat["between_runs"]  # the runs it did not make
    own = by_repeat["wall"].sub(called, fill_value=0).clip(lower=0).add(untimed).groupby(level="unit").median()
    timed_units = units.drop_duplicates("unit").set_index("unit")
    points = {int(size): sorted((timed_units.loc[u, "audio_seconds"], u) for u in per_unit if timed_units.loc[u, "size"] == size)
              for size in timed_units["size"].unique()}
    totals = np.zeros(len(FIGURES) + 1)
    for seconds, size in every_unit:
        near = points.get(size) or points[max(points)]
        lengths = [s for s, _ in near]
        per_row = [np.append(per_unit[u], own[u]) / timed_units.loc[u, "size"] for _, u in near]
        totals += size * np.array([np.interp(seconds, lengths, [p[i] for p in per_row]) for i in range(len(FIGURES) + 1)])
    capture_seconds, graphs = _captures(cold, units, every_unit, runs, calls["run"].dropna().unique(), room)
    once = float(cold.loc[cold["once"], "extra"].sum()) + capture_seconds
    lazy = float(cold.loc[cold["lazy"], "extra"].sum())
    median, low, high, prefill, overhead = totals
    return ModeCost(total=median + overhead + once, low=low + overhead + once, high=high + overhead + once,
                    prefill=prefill, decode=median - prefill, overhead=overhead, once=once, lazy=lazy, units=len(every_unit),
                    timed_units=len(per_unit), graphs=graphs)


def payers(runs: list) -> set[int]:
    """The runs that compute a sample's layers < K for the later token presses at the same K: the first
    at each K, in the sweep's order (``kvprune.generation.layer_reuse``)."""
    first: dict[int, int] = {}
    for index, run in enumerate(runs):
        k = shared_layers(run.press)
        if k is not None:
            first.setdefault(k, index)
    return set(first.values())


def _run_figures(measured: dict, runs: list, index: int, paying: set[int] = frozenset()) -> np.ndarray:
    """A run's figures: measured, or on the line through its method's timed ratios (the paying run
    left out where others are there)."""
    if index in measured:
        return measured[index][list(FIGURES)].to_numpy(float)
    run = runs[index]
    same = [i for i in measured if runs[i].method_id == run.method_id]
    same = [i for i in same if i not in paying] if len([i for i in same if i not in paying]) >= 2 else same
    points = sorted((runs[i].ratio, measured[i][list(FIGURES)].to_numpy(float)) for i in same)
    ratios = [r for r, _ in points]
    return np.array([_line(run.ratio, ratios, [p[k] for _, p in points]) for k in range(len(FIGURES))])


def _line(x: float, xs: list[float], ys: list[float]) -> float:
    """``ys`` at ``x`` on straight lines through the points, the end ones extended beyond them."""
    if len(xs) == 1:
        return ys[0]
    if xs[0] <= x <= xs[-1]:
        return float(np.interp(x, xs, ys))
    a, b = (0, 1) if x < xs[0] else (-2, -1)
    return ys[a] + (x - xs[a]) * (ys[b] - ys[a]) / (xs[b] - xs[a])


def grouping(run, split: int) -> tuple:
    """How a run's decode states group their layers, whatever the lengths: runs of one grouping share states. Token
    presses at one K (FastV, frame, random and DART alike) and the unpruned run, whose caches the engine splits at
    that K (``unpruned_split``), share one; a press whose cache is laid out its own way (a cache press's budgets per
    layer) has its own."""
    if run.press is None or run.ratio == 0:
        return ("kept", split)
    k = shared_layers(run.press)
    return ("kept", k) if k is not None else ("own", run.method_id)


def states_made(runs: list, room: float = ROOM) -> int:
    """The decode states ``runs``, in this order, make for one prompt by the engine's rule (``kept_states.holds``: a
    kept state of the same grouping with room for a run's entries, and at most ``room`` times that, is reused), a
    run's entries taken as 1 - its ratio of the prompt's (its text and the buckets' rounding left out)."""
    split = unpruned_split(run.press for run in runs)
    states: dict[tuple, list[float]] = {}  # per grouping, the entries each of its states holds
    made = 0
    for run in runs:
        need, kept = 1.0 - run.ratio, states.setdefault(grouping(run, split), [])
        if not any(holds(have, need, room) for have in kept):
            kept.append(need)
            made += 1
    return made


def _captures(cold: pd.DataFrame, units: pd.DataFrame, every_unit: list[tuple[float, int]], runs: list,
              timed_runs, room: float) -> tuple[float, float]:
    """Graph captures the timed units met, scaled to the length buckets every unit spans and to the decode states
    every run makes against those the timed runs made (``states_made``: the timing left ratios out, and a ratio far
    from the timed ones needs a state of its own): their seconds and how many graphs that prices. A run's first call
    that captured is priced as met, with its lazy set-up (``once``), and counted as met."""
    graphs_in_first_calls = float(cold.loc[cold["once"], "captured"].sum())
    captures = cold.loc[~cold["once"]]
    spanned = lambda lengths: len({math.floor(BUCKETS_PER_OCTAVE * math.log2(max(s, 1e-3))) for s in lengths})  # noqa: E731
    buckets = spanned([s for s, _ in every_unit]) / max(1, spanned(units["audio_seconds"].unique()))
    timed = states_made([runs[int(i)] for i in sorted(timed_runs)], room)
    scale = buckets * states_made(runs, room) / max(1, timed)
    return float(captures["extra"].sum()) * scale, float(captures["captured"].sum()) * scale + graphs_in_first_calls
