"""STAR-Bench aggregates equal the official code's (ALMEval_code: run.py, datasets/starbench.py) in
the three cases where a sweep's scoring once departed from it: a failed generation is scored as the
text ``"ERROR: <exception>"``; a sub-category whose rows carry two categories counts under its first
row's category in the perception table; the Final MA's "Samples" counts unique items. The expected
numbers are computed here the way the official code does, with pandas as it does."""

from __future__ import annotations

import pandas as pd
import pytest

from kvprune.harness.official import starbench
from kvprune.harness.sweep.breakdown import breakdown, suite_scores
from kvprune.harness.sweep.rescore import regraded
from kvprune.harness.sweep.plan import PlannedSample
from kvprune.harness.sweep.summary import summarize
from kvprune.harness.tasks.suites import get_suite
from kvprune.harness.tasks.task import get_task
from tests.support import benchmark_fixtures


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("starbench")
    benchmark_fixtures.starbench(root)
    return root


def rows(task, samples, outputs) -> list[dict]:
    """Result rows as a sweep writes them (the identity fields a summary groups by included)."""
    return [dict(row, layer=None, method_id="none", settings_id="s", error=None, warmup=False)
            for row in benchmark_fixtures.rows_of(task, samples, outputs)]


# run.py: `except Exception as e: response = f"ERROR: {e}"`, then dataset.evaluate_item(meta, response)
@pytest.mark.parametrize("message", ["shape mismatch: expected D dimensions, got 3", "CUDA out of memory (B of 80 GiB)",
                                     "Answer: C was not produced", "connection reset"])
def test_a_failed_generation_is_scored_as_the_official_error_text(root, message):
    for name in ("starbench_sr", "starbench_pc"):
        task = get_task(name)
        for sample in task.load(root):
            grade = task.grade(None, sample, failure=message)
            official = starbench.parse_answer(f"ERROR: {message}", sample.choices)  # "<X>" or "Z"
            assert grade.parsed == task.parse(f"ERROR: {message}", sample)
            assert grade.scores["correct"] == float(official == f"<{sample.answer}>")


def test_a_failed_run_scored_again_keeps_its_error_and_reads_its_message(root):
    task = get_task("starbench_sr")
    sample = task.load(root)[1]  # gold B
    row = dict(rows(task, [sample], [None])[0], error="RuntimeError: bad tensor at B, giving up", output=None)
    again = regraded(row, task, PlannedSample(sample, None, "h", "g"))
    assert again["error"] == row["error"] and again["grade_hash"] == "g"
    assert again["parsed"] == task.parse("ERROR: bad tensor at B, giving up", sample)
    assert again["correct"] == float(starbench.parse_answer("ERROR: bad tensor at B, giving up", sample.choices) == "<B>")
    unanswered = get_task("gtzan")  # a task without failed_reply: a failed run is no answer
    assert unanswered.failed_reply is None and get_task("starbench_tr").failed_reply == "ERROR: {error}"


def test_a_regraded_row_keeps_none_of_its_old_scores_when_the_new_grade_stores_fewer(root, monkeypatch):
    """A grading that fails stores no scores: the old row's are replaced by those of no answer, not kept."""
    from kvprune.harness.tasks.sample import Grade

    task = get_task("starbench_sr")
    sample = task.load(root)[1]
    row = dict(rows(task, [sample], [f"<{sample.answer}>"])[0], correct=1.0)
    monkeypatch.setattr(type(task), "grade", lambda self, *args, **kwargs: Grade(None, {}, ValueError("unparsable")))
    again = regraded(row, task, PlannedSample(sample, None, "h", "g"))
    assert again["correct"] == task.score(None, sample)["correct"] == 0.0
    assert again["error"] == "ValueError: unparsable"


def official_perception_categories(records: list[dict]) -> dict[str, float]:
    """``PerceptionDataset.evaluate``'s "By Category" AA, line by line in pandas: sub-categories
    grouped, each with the category of its first row, categories the mean of their sub-categories'
    2-decimal AAs."""
    df = pd.DataFrame([{"id": r["item"], "category": r["meta"]["category"], "sub-category": r["meta"]["sub-category"],
                        "is_correct": bool(r["correct"])} for r in sorted(records, key=lambda r: r["position"])])
    subs = [{"category": g["category"].iloc[0], "AA": float(f"{g['is_correct'].mean() * 100:.2f}")}
            for _, g in df.groupby("sub-category")]
    return {cat: float(f"{g['AA'].mean():.2f}") for cat, g in pd.DataFrame(subs).groupby("category")}


def test_a_sub_category_spread_over_two_categories_counts_under_its_first_rows(root):
    task = get_task("starbench_pc")
    samples = task.load(root)
    records = rows(task, samples, ["<A>" if s.item != "pc_pitch_2" else "<B>" for s in samples])
    for record in records:  # pc_pitch_2 is labelled spatial: pitch (first row: pc_pitch_1, acoustic) spans two
        if record["item"] == "pc_pitch_2":
            record["meta"] = {**record["meta"], "category": "spatial"}
    table = breakdown(pd.DataFrame(records), {task.name: task})
    ours = {r.value: r.starbench_aa for r in table.itertuples() if r.field == "category"}
    official = official_perception_categories(records)
    assert ours == official
    assert set(official) == {"acoustic", "spatial"} and official["spatial"] == ours["spatial"]
    results = [starbench.RunResult(r["item"], r["meta"]["category"], r["meta"]["sub-category"], bool(r["correct"]))
               for r in sorted(records, key=lambda r: r["position"])]
    assert {k: v["AA"] for k, v in starbench.part_scores("pc", results)["By Category"].items()} == official


def test_the_final_ma_counts_unique_items_not_runs(root):
    tasks = {name: get_task(name) for name in get_suite("starbench").tasks}
    records = [row for task in tasks.values() for row in rows(task, task.load(root), ["<A>"] * len(task.load(root)))]
    summary = summarize(pd.DataFrame(records), tasks)
    ma = suite_scores(summary, [get_suite("starbench")])
    parts = {name.removeprefix("starbench_"): frame for name, frame in pd.DataFrame(records).groupby("task")}
    official = starbench.final_ma({part: {"AA": 0.0, "ACR": 0.0, "unique_samples": frame["item"].nunique()}
                                   for part, frame in parts.items()})
    assert ma["samples"].item() == official["Samples"] == 4 + 2 + 2  # items, where the runs number 11 + 6 + 6
    assert summary.set_index("task")["items"].to_dict() == {"starbench_pc": 4, "starbench_sr": 2, "starbench_tr": 2}
