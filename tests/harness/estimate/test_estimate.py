"""``kvprune estimate`` on the CPU: every task priced three ways through the sweep's own code, hours that
add up, untimed ratios and batches priced by lines through timed ones, an interrupted estimate resumed
(another estimate's folder refused), and a call below its compute floor stopping the estimate."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from kvprune.harness.cli import main
from kvprune.harness.estimate import estimate as estimate_module
from kvprune.harness.estimate import floor as floor_module
from kvprune.harness.estimate.config import MODES, EstimateConfig
from kvprune.harness.estimate.estimate import chosen_batches, run_estimate, settings_key, timed_runs
from kvprune.harness.estimate.pricing import _run_figures, frames, mode_cost, payers, states_made
from kvprune.harness.estimate.timing import Call, Unit
from kvprune.harness.estimate.published import published
from kvprune.harness.estimate.report import earlier_rows, write_estimate
from kvprune.harness.estimate.report_rows import FIXED
from kvprune.harness.sweep.plan import runs_of

TASKS = ["gtzan", "vesus"]
SMALL = dict(preset="tiny-omni", tasks=TASKS, methods=["fastv", "frame"], ratios=[0.1, 0.5, 0.9], batch_size=2,
             samples_per_task=1, batches_per_task=1, repeats=2, timed_ratios=2, limit=3, timing_samples=1,
             device="cpu")


def config(tmp_path, **changes) -> EstimateConfig:
    return EstimateConfig(**{**SMALL, "out": tmp_path / "estimate", **changes})


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    torch.manual_seed(0)
    return run_estimate(config(tmp_path_factory.mktemp("estimate")), progress=False)


def test_every_task_is_priced_three_ways_with_its_published_durations(table):
    tasks = table[~table["task"].isin(["total", FIXED])]
    assert sorted(tasks["task"].unique()) == sorted(TASKS)
    for task, group in tasks.groupby("task"):
        assert sorted(group["mode"]) == sorted(MODES)
        runs = 1 + 2 * 3  # unpruned, and fastv and frame at 3 ratios
        assert (group["samples"] == 3).all() and (group["sample_runs"] == 3 * runs).all()
        low, high = published(task).seconds
        shortest, longest = map(float, group["audio_seconds"].iloc[0].split("-"))
        assert low <= shortest <= longest <= high
        assert (group["answer_tokens"] == 2).all(), "letter answers: the letter and the end token"
        assert (group["seconds_low"] <= group["seconds"]).all() and (group["seconds"] <= group["seconds_high"]).all()
    assert (tasks["gpu_hours"] > 0).all()


def test_without_the_timing_subset_no_sample_is_timed_alone(tmp_path, monkeypatch):
    """``--batch-size auto`` prices sizes by what they change: the timing subset, the same at any size, is
    neither timed nor priced."""
    modes = []
    time_batch = estimate_module.TimedBatches.time_batch
    monkeypatch.setattr(estimate_module.TimedBatches, "time_batch",
                        lambda self, task, work, timed, how, context: modes.append(context["mode"]) or
                        time_batch(self, task, work, timed, how, context))
    quick = dict(tasks=["vesus"], methods=["fastv"], ratios=[0.5], repeats=1, modes=["sweep"])
    table = run_estimate(config(tmp_path, **quick), progress=False, outputs=False, timing_subset=False)
    assert set(modes) == {"sweep"}
    row = table[(table["task"] == "vesus")].iloc[0]
    assert row["timing_subset_hours"] == 0 and "timing subset" not in str(row["note"])
    modes.clear()
    run_estimate(config(tmp_path / "with", **quick), progress=False, outputs=False)
    assert set(modes) == {"sweep", "batch1"}, "the subset is priced from samples timed alone"


def test_the_hours_split_into_their_parts_and_add_up_to_the_totals(table):
    tasks = table[table["task"] != "total"]
    parts = tasks[["prefill_hours", "decode_hours", "timing_subset_hours", "overhead_hours", "once_hours"]].sum(axis=1)
    assert parts.to_numpy() == pytest.approx(tasks["gpu_hours"].to_numpy(), rel=1e-9)
    totals = table[table["task"] == "total"].set_index("mode")
    for mode in MODES:
        assert totals.loc[mode, "gpu_hours"] == pytest.approx(tasks.loc[tasks["mode"] == mode, "gpu_hours"].sum())
    priced = tasks[tasks["task"] != FIXED]
    assert (priced.loc[priced["mode"] != "sweep", "timing_subset_hours"] == 0).all()
    assert (priced.loc[priced["mode"] == "sweep", "timing_subset_hours"] > 0).all(), "batch 2: a timing subset"
    fixed = tasks[tasks["task"] == FIXED]
    assert set(fixed["mode"]) == set(MODES) and (fixed["gpu_hours"] > 0).all()
    assert all(word in fixed["note"].iloc[0] for word in ("start", "load", "plan", "outputs"))


def test_an_untimed_ratio_costs_what_a_line_through_its_method_s_timed_ratios_says(tmp_path):
    runs = runs_of(config(tmp_path))
    fastv = [i for i, run in enumerate(runs) if run.method == "fastv"]  # ratios 0.1, 0.5, 0.9
    figures = lambda *values: pd.Series(dict(zip(("median", "low", "high", "prefill"), values)))  # noqa: E731
    measured = {fastv[0]: figures(1.0, 0.5, 1.5, 0.4), fastv[2]: figures(3.0, 2.5, 3.5, 0.8)}
    assert _run_figures(measured, runs, fastv[1]) == pytest.approx([2.0, 1.5, 2.5, 0.6])
    assert _run_figures(measured, runs, fastv[0]) == pytest.approx([1.0, 0.5, 1.5, 0.4])
    assert [runs.index(run) for run in timed_runs(runs, 2)] == [0, fastv[0], fastv[2], fastv[2] + 1, fastv[2] + 3]
    # sharing layers < K: fastv 0.1 runs them for every later token press at K = 2; a line through the runs
    # that replayed them (0.5, 0.9), extended, prices 0.3
    assert payers(runs) == {fastv[0]}
    measured[fastv[1]] = figures(2.5, 2.0, 3.0, 0.7)
    middle = runs_of(config(tmp_path, ratios=[0.1, 0.3, 0.5, 0.9]))
    assert _run_figures({1: measured[fastv[0]], 3: measured[fastv[1]], 4: measured[fastv[2]]}, middle, 2, {1}) == (
        pytest.approx([2.25, 1.75, 2.75, 0.65]))


def test_a_batch_pays_one_run_s_own_work_for_every_run_the_timing_left_out(tmp_path):
    """A timed batch makes only the timed runs (5 of 7 here); the sweep's batch makes all 7, and each run adds
    its own work between two calls (grading, writing its rows): the batch's own work is what its wall time
    leaves of its calls plus that gap for each of the 2 runs it did not make."""
    runs = runs_of(config(tmp_path))
    timed = [runs.index(run) for run in timed_runs(runs, 2)]
    prep, gap, call_s = 0.05, 0.01, 0.1
    calls, units = [], []
    for repeat in range(2):
        context = dict(task="t", mode="sweep", unit=0, repeat=repeat)
        clock = 100.0 * repeat + prep
        for run in timed:
            calls.append(Call(context, run, 1, call_s, call_s / 2, call_s / 2, False, 0, False, [10], [5], [None], 2,
                              clock, clock + call_s))
            clock += call_s + gap
        wall = prep + len(timed) * call_s + (len(timed) - 1) * gap
        units.append(Unit(context, wall, 15.0, 1, len(timed), gap))
    call_frame, unit_frame = frames(calls, units, "t", "sweep")
    cost = mode_cost(call_frame, unit_frame, runs, [(15.0, 1)])
    own = prep + (len(timed) - 1) * gap + (len(runs) - len(timed)) * gap
    assert len(runs) - len(timed) == 2
    assert cost.overhead == pytest.approx(own)
    assert cost.total == pytest.approx(len(runs) * call_s + own), "every run's call at 0.1 s, the untimed ones on lines"


def _captures_priced(runs, call_s: float, capture_s: float, capturing: set, room: float = 1):
    """The cost (``ModeCost``: ``once``, ``graphs``) of ``runs`` when two repeats of one batch timed them
    (``timed_runs(runs, 2)``), the first repeat capturing a graph for each timed run in ``capturing`` ((method, ratio)
    pairs: the runs that make a new decode state; the others decode in a kept one), on an engine of ``room``."""
    calls, units = [], []
    for repeat in range(2):
        context = dict(task="t", mode="sweep", unit=0, repeat=repeat)
        for run in (runs.index(run) for run in timed_runs(runs, 2)):
            captured = int(repeat == 0 and (runs[run].method, runs[run].ratio) in capturing)
            seconds = call_s + capture_s * captured
            calls.append(Call(context, run, 1, seconds, call_s / 2, seconds - call_s / 2, False, captured, False, [10],
                              [5], [None], 2, 0.0, seconds))
        units.append(Unit(context, sum(c.seconds for c in calls if c.context is context), 15.0, 1, 5, 0.0))
    call_frame, unit_frame = frames(calls, units, "t", "sweep")
    return mode_cost(call_frame, unit_frame, runs, [(15.0, 1)], room=room)


def test_graph_captures_are_priced_for_the_decode_states_the_sweep_s_runs_make(tmp_path):
    """Runs share decode states (and their graphs) where one grouping of layers holds a run's entries: token presses
    at one K (FastV and frame here) and the unpruned run, split at that K. A run keeps 1 - its ratio of the prompt. By
    the engine's default (a state of the run's own shape) the timed runs (unpruned, then each method at 0.1 and 0.9)
    make 3 states, frame reusing FastV's; the sweep's runs at ratios 0.1, 0.3, 0.5, 0.7 and 0.9 make 6. So 3 captures
    met (0.4 s each beyond the warm call) price 6; at ratios 0.1 and 0.9 alone the sweep makes the 3 the timing met.
    With states kept within twice a run's room (``state_room=2``) the timed runs make 2: the unpruned run's (1.0),
    which FastV 0.1 (0.9) reuses, and FastV 0.9's (0.1); the sweep's 3: 1.0 (holding 0.9, 0.7 and 0.5), 0.3, 0.1."""
    runs = runs_of(config(tmp_path, ratios=[0.1, 0.3, 0.5, 0.7, 0.9]))
    timed = [runs[i] for i in (0, 1, 5)]
    assert [(run.method, run.ratio) for run in timed_runs(runs, 2)] == [
        ("none", 0.0), ("fastv", 0.1), ("fastv", 0.9), ("frame", 0.1), ("frame", 0.9)]
    assert [(run.method, run.ratio) for run in timed] == [("none", 0.0), ("fastv", 0.1), ("fastv", 0.9)]
    assert states_made(runs) == 6 and states_made(timed) == 3
    assert states_made(runs, room=2) == 3 and states_made(timed, room=2) == 2
    capturing = {("none", 0.0), ("fastv", 0.1), ("fastv", 0.9)}
    every_ratio = _captures_priced(runs, 0.1, 0.4, capturing)
    assert (every_ratio.once, every_ratio.graphs) == (pytest.approx(6 * 0.4), pytest.approx(6))
    timed_ratios = _captures_priced(runs_of(config(tmp_path, ratios=[0.1, 0.9])), 0.1, 0.4, capturing)
    assert (timed_ratios.once, timed_ratios.graphs) == (pytest.approx(3 * 0.4), pytest.approx(3))
    roomy = _captures_priced(runs, 0.1, 0.4, {("none", 0.0), ("fastv", 0.9)}, room=2)  # FastV 0.1 in the unpruned state
    assert (roomy.once, roomy.graphs) == (pytest.approx(3 / 2 * 2 * 0.4), pytest.approx(3))


def test_a_cache_press_s_states_are_its_own_grouping(tmp_path):
    """knorm at 0.25, 0.5 and 0.75 keeps 0.75, 0.5 and 0.25: a state each, beside the unpruned run's (a grouping of
    its own: no token press sets a K to share); kept within twice a run's room, 0.75's state holds 0.5, not 0.25."""
    runs = runs_of(config(tmp_path, methods=["knorm"], ratios=[0.25, 0.5, 0.75]))
    assert [(run.method, run.ratio) for run in runs] == [("none", 0.0), ("knorm", 0.25), ("knorm", 0.5), ("knorm", 0.75)]
    assert states_made(runs) == 4 and states_made(runs, room=2) == 3


def test_timed_batches_are_the_first_and_last_full_ones_spread_between_and_a_smaller_last():
    assert chosen_batches([4] * 10, 2) == [0, 9]
    assert chosen_batches([4] * 10 + [3], 3) == [0, 4, 9, 10]
    assert chosen_batches([4], 2) == [0]
    assert chosen_batches([1] * 5, 1) == [0]


def test_an_interrupted_estimate_resumes_with_the_tasks_it_had_and_refuses_other_settings(tmp_path, capsys):
    quick = dict(modes=["sweep"], repeats=1, limit=2)
    first = config(tmp_path, tasks=TASKS[:1], **quick)
    done = run_estimate(first, progress=False)
    settings = config(tmp_path, **quick)
    done_rows = done[~done["task"].isin(["total", FIXED])].reset_index(drop=True)
    done_rows["settings"] = settings_key(settings)  # as if made by the full command, interrupted after its first task
    write_estimate(done_rows, settings.out, "kvprune estimate ...")

    resumed = run_estimate(settings, progress=False, earlier=earlier_rows(settings.out, settings_key(settings)))
    rows = resumed[~resumed["task"].isin(["total", FIXED])]
    kept = rows[rows["task"] == TASKS[0]].reset_index(drop=True)
    assert kept["gpu_hours"].tolist() == pytest.approx(done_rows["gpu_hours"].tolist(), rel=1e-12)  # not timed again
    assert set(kept["call"]) == {1} and set(rows.loc[rows["task"] == TASKS[1], "call"]) == {2}

    with pytest.raises(ValueError, match="other settings"):
        earlier_rows(settings.out, settings_key(config(tmp_path, batch_size=3, **quick)))
    argv = ["estimate", "--preset", "tiny-omni", "--tasks", ",".join(TASKS), "--batch-size", "3", "--device", "cpu",
            "--out", str(settings.out), "--quiet"]
    assert main(argv) == 2
    assert "other settings" in capsys.readouterr().err


def test_a_call_faster_than_its_compute_floor_stops_the_estimate_naming_the_task(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(floor_module, "matrix_rate", lambda device, dtype: 1.0)  # 1 FLOP/s: every call is "too fast"
    monkeypatch.setattr("kvprune.harness.estimate.estimate.matrix_rate", lambda device, dtype: 1.0)
    argv = ["estimate", "--preset", "tiny-omni", "--tasks", "vesus", "--limit", "1", "--methods", "fastv", "--ratios",
            "0.5", "--repeats", "1", "--modes", "sweep", "--device", "cpu", "--out", str(tmp_path / "e"), "--quiet"]
    assert main(argv) == 1
    error = capsys.readouterr().err
    assert "task vesus" in error and "compute floor" in error


def test_the_comparison_reads_right_whichever_way_is_cheaper():
    """A sweep that costs more than one sample at a time (fixed costs dominate, as on the demo on a GPU) is said
    to take more hours, not '0.86x fewer'."""
    import pandas as pd

    from kvprune.harness.estimate.report import _comparison

    def table(sweep_hours: float) -> pd.DataFrame:
        return pd.DataFrame([dict(task="a", mode="batch1", gpu_hours=2.0), dict(task="a", mode="sweep", gpu_hours=sweep_hours)])

    assert _comparison(table(0.5), ["batch1", "sweep"]) == [
        "- all tasks: the sweep's settings take 4.00x fewer hours than kvprune one sample at a time (0.500 h)."]
    (line,) = _comparison(table(2.5), ["batch1", "sweep"])
    assert "1.25x more hours than kvprune one sample at a time" in line and "fewer" not in line
