"""The report's notes say what ran: how failed runs count in each task's score (as its primary metric
counts a row without an answer), the refine step as the judge ran it or not, where timings come from
(none at all with ``--timing-samples 0``), and only figures that exist."""

from __future__ import annotations

import pandas as pd
import pytest

from kvprune.harness.cli import main
from kvprune.harness.sweep.breakdown import task_note
from kvprune.harness.sweep.report import failure_banner
from kvprune.harness.sweep.summary import failure_effect
from kvprune.harness.tasks.metrics import METRICS
from kvprune.harness.tasks.task import get_task
from tests.support import benchmark_fixtures


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return benchmark_fixtures.written(tmp_path_factory.mktemp("data"), benchmark_fixtures.avibench_asqa, benchmark_fixtures.mmau)


@pytest.mark.parametrize(("name", "replies", "failed"), [
    ("avibench_asqa", ["Sound first.", "Yes.", "4 beats.", "The first.", "Yes."], 2),
    ("mmau", ["barking", "piano", "Mono first, stereo later"], 1),
])
def test_each_metric_says_what_it_makes_of_a_failed_run(root, name, replies, failed):
    """A failed run's row scores as no answer: for a metric that skips it, as if the row were not
    there; for one that counts it wrong, as a wrong reply would."""
    task = get_task(name)
    samples = task.load(root)
    with_failure = benchmark_fixtures.rows_of(task, samples, [None if i == failed else r for i, r in enumerate(replies)])
    score = task.summarize(with_failure)[task.primary_metric]
    if METRICS.get(task.primary_metric).no_answer == "skipped":
        assert name == "avibench_asqa"
        left_out = [row for i, row in enumerate(benchmark_fixtures.rows_of(task, samples, replies)) if i != failed]
        assert score == task.summarize(left_out)[task.primary_metric]
    else:
        assert name == "mmau"
        wrong = benchmark_fixtures.rows_of(task, samples, ["zzz" if i == failed else r for i, r in enumerate(replies)])
        assert score == task.summarize(wrong)[task.primary_metric] < task.summarize(
            benchmark_fixtures.rows_of(task, samples, replies))[task.primary_metric]


def _results(failed_tasks: list[str]) -> pd.DataFrame:
    rows = [dict(model="m", task=task, method="none", ratio=0.0, sample_id=f"s{i}", error=f"ValueError: broken {i}"
                 if i == 0 and task in failed_tasks else None) for task in ("avibench_asqa", "mmau") for i in range(2)]
    return pd.DataFrame(rows)


def test_the_failure_note_follows_each_task_s_metric():
    tasks = {name: get_task(name) for name in ("avibench_asqa", "mmau")}
    assert failure_effect(_results([]), tasks) == ""
    assert failure_effect(_results(["mmau"]), tasks) == "Each counts as a wrong answer."
    skipped = failure_effect(_results(["avibench_asqa"]), tasks)
    assert skipped.startswith("Each is left out, as the benchmark's own scorer leaves out a question without an answer")
    assert failure_effect(_results(["avibench_asqa", "mmau"]), tasks) == (
        "In mmau a failed run counts as a wrong answer; in avibench_asqa it is left out, as the benchmark's own scorer "
        "leaves out a question without an answer.")
    banner = failure_banner(_results(["avibench_asqa"]), tasks)
    assert "**Warning: 1 of 4 runs failed.** Each is left out" in banner and "wrong answer" not in banner


def test_the_refine_note_says_whether_the_judge_ran_it():
    task = get_task("avibench_asqa")
    assert task_note(task, None).startswith("Without --judge, AVI-Bench's LLM refine step is not run")
    with_judge = task_note(task, "openai:http://127.0.0.1:8000/v1@judge")
    assert "Without --judge" not in with_judge and "graded with --judge openai:http://127.0.0.1:8000/v1@judge" in with_judge
    assert task_note(get_task("mmau"), "openai:http://127.0.0.1:8000/v1@judge") == get_task("mmau").notes.strip()


def demo_sweep(out, *extra) -> list[str]:
    return ["sweep", "--tasks", "demo_pitch", "--methods", "frame", "--ratios", "0.5", "--limit", "3", "--out", str(out),
            "--device", "cpu", "--quiet", "--max-new-tokens", "2", *extra]


def test_no_timing_subset_and_no_figures_say_so(tmp_path):
    """``--timing-samples 0`` beside the shared scoring pass times nothing: the report says so (not
    "every sample", no share of speedups within the noise); ``--no-plots`` links no figure."""
    out = tmp_path / "out"
    assert main(demo_sweep(out, "--timing-samples", "0", "--no-plots")) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert summary["prefill_ms_median"].isna().all() and set(summary["timing_source"]) == {"none"}
    assert (summary["timed_samples"] == 0).all()
    report = (out / "report.md").read_text()
    assert "- Timings: none. `--timing-samples 0` asked for no timing subset" in report
    assert "every sample" not in report and "timing noise" not in report
    assert ".png" not in report and not list(out.glob("*.png"))

    assert main(["plot", str(out)]) == 0 and main(["report", str(out)]) == 0  # figures drawn apart: linked, said so
    report = (out / "report.md").read_text()
    assert "![score vs ratio](demo_score_vs_ratio.png)" in report and "as they were last drawn" in report
