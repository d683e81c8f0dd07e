"""``kvprune estimate`` on a tiny preset (CPU): every task priced three ways, the hours split into
prefill and decoding that add up, untimed ratios interpolated between timed ones, and an interrupted
estimate resumed (another estimate's folder refused)."""

from __future__ import annotations

import pytest
import torch

from kvprune.harness.cli import main
from kvprune.harness.estimate.config import EstimateConfig
from kvprune.harness.estimate.estimate import _interpolated, run_estimate, settings_key, spread
from kvprune.harness.estimate.measure import MODES, Cost
from kvprune.harness.estimate.published import published
from kvprune.harness.estimate.report import earlier_rows, write_estimate
from kvprune.harness.sweep.plan import runs_of

TASKS = ["gtzan", "vesus"]


def config(tmp_path, **changes) -> EstimateConfig:
    settings = dict(preset="tiny-omni", tasks=TASKS, methods=None, ratios=[0.1, 0.5, 0.9], batch_size=2,
                    samples_per_task=1, decode_tokens=2, timed_ratios=2, device="cpu", out=tmp_path / "estimate")
    return EstimateConfig(**{**settings, **changes})


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    torch.manual_seed(0)
    return run_estimate(config(tmp_path_factory.mktemp("estimate")), progress=False)


def test_every_task_is_priced_three_ways_with_its_published_size(table):
    tasks = table[table["task"] != "total"]
    assert sorted(tasks["task"].unique()) == sorted(TASKS)
    for task, group in tasks.groupby("task"):
        assert sorted(group["mode"]) == sorted(MODES)
        runs = 1 + 4 * 3  # unpruned, and fastv, random, frame, dart at 3 ratios
        assert (group["samples"] == published(task).samples).all()
        assert (group["sample_runs"] == published(task).samples * runs).all()
    assert (tasks["gpu_hours"] > 0).all()


def test_the_hours_split_into_prefill_decoding_and_the_timing_subset_and_add_up(table):
    parts = table["prefill_hours"] + table["decode_hours"] + table["timing_subset_hours"]
    assert parts.to_numpy() == pytest.approx(table["gpu_hours"].to_numpy(), rel=1e-12)
    tasks, totals = table[table["task"] != "total"], table[table["task"] == "total"].set_index("mode")
    for mode in MODES:
        assert totals.loc[mode, "gpu_hours"] == pytest.approx(tasks.loc[tasks["mode"] == mode, "gpu_hours"].sum())
    # only the sweep's settings add a timing subset (batch 2: its samples also run one at a time)
    assert (tasks.loc[tasks["mode"] != "sweep", "timing_subset_hours"] == 0).all()
    assert (tasks.loc[tasks["mode"] == "sweep", "timing_subset_hours"] > 0).all()


def test_an_untimed_ratio_costs_what_a_line_through_its_method_s_timed_ratios_says(tmp_path):
    runs = runs_of(config(tmp_path))
    fastv = sorted((run for run in runs if run.method == "fastv"), key=lambda run: run.ratio)
    costs = {fastv[0]: (1.0, 10.0), fastv[-1]: (3.0, 2.0)}  # ratios 0.1 and 0.9
    assert _interpolated(costs, fastv[1], runs) == pytest.approx((2.0, 6.0))  # ratio 0.5: half way
    assert _interpolated(costs, fastv[0], runs) == (1.0, 10.0)
    assert Cost(prefill_s=0.4, step_s=0.1, rows=2).parts(11) == pytest.approx((0.2, 0.5))


def test_an_interrupted_estimate_resumes_with_the_tasks_it_had_and_refuses_other_settings(tmp_path, capsys):
    first = config(tmp_path, tasks=TASKS[:1])
    done = run_estimate(first, progress=False)
    settings = config(tmp_path)
    write_estimate(done, settings.out, "kvprune estimate ...")  # what an interrupted run of both tasks left
    done_rows = done[done["task"] != "total"].reset_index(drop=True)
    done_rows["settings"] = settings_key(settings)  # as if made by the full command
    done_rows.to_csv(settings.out / "estimate.csv", index=False)

    resumed = run_estimate(settings, progress=False, earlier=earlier_rows(settings.out, settings_key(settings)))
    rows = resumed[resumed["task"] != "total"]
    kept = rows[rows["task"] == TASKS[0]].reset_index(drop=True)
    assert kept["gpu_hours"].tolist() == pytest.approx(done_rows["gpu_hours"].tolist(), rel=1e-12)  # not timed again
    assert set(kept["call"]) == {1} and set(rows.loc[rows["task"] == TASKS[1], "call"]) == {2}

    with pytest.raises(ValueError, match="other settings"):
        earlier_rows(settings.out, settings_key(config(tmp_path, batch_size=3)))
    argv = ["estimate", "--preset", "tiny-omni", "--tasks", ",".join(TASKS), "--batch-size", "3", "--device", "cpu",
            "--out", str(settings.out), "--quiet"]
    assert main(argv) == 2
    assert "other settings" in capsys.readouterr().err


@pytest.mark.parametrize("count", [1, 2, 3, 20])
def test_lengths_timed_have_the_range_s_middle_as_their_mean_at_any_count(count):
    # one at a time and in batches, the ways are timed on lengths of the same mean (one length: the middle)
    lengths = spread([90.0, 210.0, 150.0], count)
    assert len(lengths) == count and sum(lengths) / count == pytest.approx(150.0)
    assert all(90.0 < s < 210.0 for s in lengths) and lengths == sorted(lengths)
    assert len(set(lengths)) == count
