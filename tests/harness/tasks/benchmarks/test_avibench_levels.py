"""AVI-Bench's task table, stage aggregates (checked against the published leaderboard rows) and
AVC's FENSE refusing, by name, to run without its scoring models."""

from __future__ import annotations

import sys

import pytest

from kvprune.harness.tasks.benchmarks.avibench.fense import (
    ECHECKER_ENCODER, ECHECKER_WEIGHTS, SBERT_MODEL, FenseModels, FenseUnavailable, caption_pairs, score_caption,
)
from kvprune.harness.tasks.benchmarks.avibench.levels import (
    STAGES, TASKS, headline, l1_task, overall, stage_scores, task_dir,
)

# docs/leaderboard/data/results.json of FudanCVL/AVI-Bench: stages, Overall and L1 as published (%)
LEADERBOARD = [
    ({"perception": 54.58, "understand": 68.97, "reasoning": 69.06, "sensation": 36.22}, 57.21, 64.20),
    ({"perception": 42.81, "understand": 39.68, "reasoning": 58.26, "sensation": 24.59}, 41.33, 46.92),
    ({"perception": 40.45, "understand": 48.60, "reasoning": 56.87, "sensation": 16.81}, 40.68, 48.64),
]


def test_the_task_table_is_the_evaluators():
    assert len(TASKS) == 15 and sum(len(t) for t in STAGES.values()) == 14  # VSQA released as two folders
    assert task_dir("AVLG") == "reasoning/AVLG" and task_dir("VSQA_I") == "sensation/VSQA_I"
    assert {TASKS[t][0] for t in STAGES["understand"]} == {"understand"}
    with pytest.raises(ValueError, match="unknown AVI-Bench task 'VSQA'"):
        task_dir("VSQA")


@pytest.mark.parametrize(("stages", "published_overall", "published_l1"), LEADERBOARD)
def test_overall_and_l1_reproduce_the_published_rows(stages, published_overall, published_l1):
    # the published stages are themselves rounded to 0.01, so their mean may be off by 0.005 before
    # its own rounding: 0.01 tolerance. A task-weighted mean would miss by ~0.7 on the first row.
    assert abs(overall(stages) - published_overall) <= 0.01
    assert abs(l1_task(stages) - published_l1) <= 0.01


def test_stage_scores_average_the_headlines_of_complete_stages():
    scores = {"AMIC": {"Average": 0.4, "Semantic": 0.9}, "VMIC": {"Average": 0.6}, "AVL": {"Average": 0.2},
              "AVM": 0.8, "AVC": {"fense": 0.5, "average": 0.5}, "VAR": {"Average": 0.1}}
    assert headline(scores["AVC"]) == 0.5 and headline(0.25) == 0.25
    assert stage_scores(scores) == {"perception": pytest.approx((0.4 + 0.6 + 0.2 + 0.8) / 4)}  # understand lacks AVR
    with pytest.raises(ValueError, match="pooled as 'VSQA'"):
        stage_scores({"VSQA_I": 0.5})
    with pytest.raises(ValueError, match="needs one of"):
        headline({"mIoU": 0.3})
    with pytest.raises(ValueError, match=r"stage scores missing: \['sensation'\]"):
        overall({"perception": 1, "understand": 1, "reasoning": 1})


def caption_entry(refs):
    return {"id": "0", "task": "AVC", "input": {"question": {}}, "output": {"question_answer": refs}}


def test_caption_pairs_are_collected_as_officially():
    entries = [caption_entry(["a dog barks", "", None, 3]), caption_entry("a car passes"), caption_entry([]),
               caption_entry(["x"]), caption_entry(["y"])]
    replies = ["A dog.<|endoftext|>", "A car.", "nothing", "", None]
    # refs: falsy items dropped, others str(); a bare reference kept as one; no reference or an empty reply: skipped
    assert caption_pairs(entries, replies) == (["A dog.", "A car."], [["a dog barks", "3"], ["a car passes"]])


def test_fense_names_its_models_when_they_are_not_here(tmp_path):
    entries, replies = [caption_entry(["a dog barks"])], ["a dog"]
    with pytest.raises(FenseUnavailable) as none_given:
        score_caption(entries, replies, None)
    assert SBERT_MODEL in str(none_given.value) and ECHECKER_ENCODER in str(none_given.value)
    models = FenseModels(tmp_path / "sbert", tmp_path / "bert", tmp_path / ECHECKER_WEIGHTS)
    with pytest.raises(FenseUnavailable, match="not found") as missing:
        score_caption(entries, replies, models)
    for name in (SBERT_MODEL, ECHECKER_ENCODER, ECHECKER_WEIGHTS, str(tmp_path / "sbert")):
        assert name in str(missing.value)


def test_fense_without_its_packages_or_captions_says_so(tmp_path, monkeypatch):
    for folder in ("sbert", "bert"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config.json").write_text("{}")
    (tmp_path / ECHECKER_WEIGHTS).write_bytes(b"")
    models = FenseModels(tmp_path / "sbert", tmp_path / "bert", tmp_path / ECHECKER_WEIGHTS)
    with pytest.raises(ValueError, match="no AVC entry has a non-empty reply"):
        score_caption([caption_entry(["a dog"])], [""], models)
    monkeypatch.setitem(sys.modules, "aac_metrics", None)  # as on a machine without aac-metrics
    with pytest.raises(FenseUnavailable, match="packages aac-metrics and sentence-transformers"):
        score_caption([caption_entry(["a dog"])], ["a dog"], models)
