"""STAR-Bench aggregates equal the official code's (ALMEval_code: run.py, datasets/starbench.py) in
the cases where a sweep's scoring once departed from it: a failed generation is scored as the text
``"ERROR: <exception>"``; a sub-category whose rows carry two categories is scored under its first
row's category in the perception table, while each category's runs and samples are those of the rows
labelled with it (every cell of the tables); the Final MA's "Samples" counts unique items. The
expected numbers are computed here the way the official code does, with pandas as it does."""

from __future__ import annotations

import pandas as pd
import pytest

from kvprune.harness.tasks.benchmarks.starbench import rules as starbench
from kvprune.harness.sweep.breakdown import breakdown, suite_scores
from kvprune.harness.sweep.rescore import regraded
from kvprune.harness.sweep.rows import ResultRow
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
    row = ResultRow.from_json(dict(rows(task, [sample], [None])[0], error="RuntimeError: bad tensor at B, giving up", output=None))
    again = regraded(row, task, PlannedSample(sample, None, "h", "g")).to_json()
    assert again["error"] == row.error and again["grade_hash"] == "g"
    assert again["parsed"] == task.parse("ERROR: bad tensor at B, giving up", sample)
    assert again["correct"] == float(starbench.parse_answer("ERROR: bad tensor at B, giving up", sample.choices) == "<B>")
    unanswered = get_task("gtzan")  # a task without failed_reply: a failed run is no answer
    assert unanswered.failed_reply is None and get_task("starbench_tr").failed_reply == "ERROR: {error}"


def test_a_regraded_row_keeps_none_of_its_old_scores_when_the_new_grade_stores_fewer(root, monkeypatch):
    """A grading that fails stores no scores: the old row's are replaced by those of no answer, not kept."""
    from kvprune.harness.tasks.sample import Grade

    task = get_task("starbench_sr")
    sample = task.load(root)[1]
    row = ResultRow.from_json(dict(rows(task, [sample], [f"<{sample.answer}>"])[0], correct=1.0))
    monkeypatch.setattr(type(task), "grade", lambda self, *args, **kwargs: Grade(None, {}, ValueError("unparsable")))
    again = regraded(row, task, PlannedSample(sample, None, "h", "g")).to_json()
    assert again["correct"] == task.score(None, sample)["correct"] == 0.0
    assert again["error"] == "ValueError: unparsable"


def official_report(part: str, records: list[dict]) -> dict:
    """ALMEval_code/datasets/starbench.py's ``evaluate`` line by line in pandas, on the evaluated rows
    in file order: ``PerceptionDataset.evaluate`` for perception (sub-categories grouped, each under
    the category of its first row, AA/ACR macro over their 2-decimal numbers; a category's runs and
    samples those of the rows labelled with it), ``MCQBaseDataset.evaluate`` for reasoning."""
    df = pd.DataFrame([{"id": r["item"], "category": r["meta"].get("category"), "sub-category": r["meta"].get("sub-category"),
                        "is_correct": bool(r["correct"])} for r in sorted(records, key=lambda r: r["position"])])

    def _calculate_metrics(df):
        aa = df["is_correct"].mean() * 100
        grouped = df.groupby("id")["is_correct"].all()
        acr = grouped.mean() * 100
        return {"AA": f"{aa:.2f}%", "ACR": f"{acr:.2f}%", "total_runs": len(df), "unique_samples": df["id"].nunique()}

    if not part.startswith("pc"):
        results = {"Total": _calculate_metrics(df)}
        if "category" in df.columns and df["category"].notna().any():
            results["By Category"] = {str(cat): _calculate_metrics(group) for cat, group in df.groupby("category")}
        if "sub-category" in df.columns and df["sub-category"].notna().any():
            results["By Sub-category"] = {str(sub): _calculate_metrics(group) for sub, group in df.groupby("sub-category")}
        return results
    by_subcat = {str(sub): _calculate_metrics(g) for sub, g in df.groupby("sub-category")}

    def pct2float(x):
        return float(x[:-1]) if isinstance(x, str) and x.endswith("%") else float(x)

    subcat_rows = []
    for sub, g in df.groupby("sub-category"):
        m = by_subcat[str(sub)]
        subcat_rows.append({"category": g["category"].iloc[0], "sub-category": sub, "AA": pct2float(m["AA"]),
                            "ACR": pct2float(m["ACR"])})
    sub_df = pd.DataFrame(subcat_rows)
    by_cat = {}
    for cat, g in sub_df.groupby("category"):
        cat_df = df[df["category"] == cat]
        by_cat[str(cat)] = {"AA": f"{g['AA'].mean():.2f}%", "ACR": f"{g['ACR'].mean():.2f}%", "n_subcategories": int(len(g)),
                            "total_runs": int(len(cat_df)), "unique_samples": int(cat_df["id"].nunique())}
    total = {"AA": f"{sub_df['AA'].mean():.2f}%", "ACR": f"{sub_df['ACR'].mean():.2f}%", "n_subcategories": int(len(sub_df)),
             "total_runs": int(len(df)), "unique_samples": int(df["id"].nunique())}
    return {"By Sub-category": by_subcat, "By Category": by_cat, "Total": total}


def as_official(cell: dict) -> dict:
    """A breakdown row (or summary row) in the official cell's terms."""
    named = {"AA": f"{cell['starbench_aa']:.2f}%", "ACR": f"{cell['starbench_acr']:.2f}%", "total_runs": int(cell["samples"]),
             "unique_samples": int(cell["items"])}
    return {**named, "n_subcategories": int(cell["n_sub-category"])} if not pd.isna(cell.get("n_sub-category")) else named


RELABELLED = {  # item -> what its rows are labelled instead
    "pc_pitch_2": {"category": "spatial"},  # sub-category pitch under two categories (first row: pc_pitch_1, acoustic)
    "pc_loud_1": {"sub-category": None},  # labelled acoustic, in no sub-category: counted, never scored
    "sr_count_1": {"category": "temporal"},
}


@pytest.mark.parametrize("name", ["starbench_pc", "starbench_sr"])
def test_every_cell_of_the_official_tables_run_counts_included(root, name):
    task = get_task(name)
    samples = task.load(root)
    outputs = ["<A>" if i % 3 else "<B>" for i in range(len(samples))]
    records = rows(task, samples, outputs)
    for record in records:
        record["meta"] = {**record["meta"], **RELABELLED.get(record["item"], {})}
    official = official_report(name.removeprefix("starbench_"), records)
    table = breakdown(pd.DataFrame(records), {task.name: task})
    for field, key in (("category", "By Category"), ("sub-category", "By Sub-category")):
        ours = {r["value"]: as_official(r) for r in table[table["field"] == field].to_dict("records")}
        assert ours == official[key], field
    summary = summarize(pd.DataFrame(records), {task.name: task}).iloc[0].to_dict()
    assert {k: v for k, v in as_official({**summary, "n_sub-category": None}).items()} == {
        k: v for k, v in official["Total"].items() if k != "n_subcategories"}
    results = [starbench.RunResult(r["item"], r["meta"]["category"], r["meta"]["sub-category"], bool(r["correct"]))
               for r in sorted(records, key=lambda r: r["position"])]
    theirs = starbench.part_scores(name.removeprefix("starbench_"), results)  # the official module: the same cells
    pct = {key: {value: {k: f"{v:.2f}%" if k in ("AA", "ACR") else v for k, v in cell.items()} for value, cell in cells.items()}
           for key, cells in theirs.items() if key != "Total"}
    assert pct == {key: official[key] for key in pct}
    if name == "starbench_pc":  # where the run counts once departed: pitch scored under acoustic, its pc_pitch_2 counted under spatial
        assert official["By Category"]["acoustic"]["total_runs"] == 3 + 4 and official["By Category"]["spatial"]["total_runs"] == 2 + 2


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
