"""Metrics say which way is better, and the summary, its Pareto fronts, task averages and report
follow: a lower-is-better metric (WER) has the lowest scores on its front."""

from __future__ import annotations

import pandas as pd
import pytest

from kvprune.harness.sweep.plots import pareto_front
from kvprune.harness.sweep.summary import summarize, task_averages
from kvprune.harness.tasks.metrics import METRICS
from kvprune.harness.tasks.task import get_task, load_task_file
from tests.support import task_fixtures

# (prefill ms, score) of eight runs; several are beaten on both axes whichever way is better
POINTS = [(8.0, 50.0), (10.0, 30.0), (10.0, 40.0), (12.0, 20.0), (15.0, 25.0), (20.0, 5.0), (25.0, 5.0), (30.0, 60.0)]


def front_by_brute_force(points, higher_is_better: bool) -> list[tuple[float, float]]:
    """Points no other point dominates: no slower, no worse, and better on one of the two."""
    def better_or_equal(a, b):
        return a >= b if higher_is_better else a <= b

    def dominates(p, q):
        return p[0] <= q[0] and better_or_equal(p[1], q[1]) and p != q

    return sorted(q for q in points if not any(dominates(p, q) for p in points))


def frame_of(points, higher_is_better: bool) -> pd.DataFrame:
    return pd.DataFrame({"prefill_ms_median": [p[0] for p in points], "score": [p[1] for p in points],
                         "higher_is_better": higher_is_better})


def test_metrics_declare_their_direction():
    lower_is_better = {name for name in METRICS if not METRICS.get(name).higher_is_better}
    assert lower_is_better == {"wer", "audiomarathon_wer", "audiomarathon_wer_all"}


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_pareto_front_follows_the_metric_direction(higher_is_better):
    front = pareto_front(frame_of(POINTS, higher_is_better))
    assert list(zip(front["prefill_ms_median"], front["score"])) == front_by_brute_force(POINTS, higher_is_better)
    expected = [(8.0, 50.0), (30.0, 60.0)] if higher_is_better else [(8.0, 50.0), (10.0, 30.0), (12.0, 20.0), (20.0, 5.0)]
    assert list(zip(front["prefill_ms_median"], front["score"])) == expected


def test_a_front_over_both_directions_is_refused():
    mixed = pd.concat([frame_of(POINTS[:4], True), frame_of(POINTS[4:], False)])
    with pytest.raises(ValueError, match="mix higher- and lower-is-better"):
        pareto_front(mixed)


def asr_results(task, tmp_path) -> pd.DataFrame:
    """Result rows of three runs on the three LibriSpeech fixtures: the baseline transcribes every
    word, fastv at 0.5 drops words and is faster, frame at 0.5 drops more and is slower."""
    task_fixtures.librispeech(tmp_path)
    samples = task.load(tmp_path)
    dropped = {("none", 0.0): 0, ("fastv", 0.5): 2, ("frame", 0.5): 4}
    prefill = {("none", 0.0): 0.030, ("fastv", 0.5): 0.020, ("frame", 0.5): 0.025}
    rows = []
    for (method, ratio), n in dropped.items():
        for sample in samples:
            parsed = " ".join(sample.answer.split()[n:])
            rows.append(dict(
                model="m", task=task.name, method=method, ratio=ratio, layer=None if method == "none" else 2,
                sample_id=sample.id, item=sample.item, parsed=parsed, reference=sample.answer,
                **task.score(parsed, sample), error=None, warmup=False, audio_seconds=1.0, audio_tokens=25,
                kept_tokens=25, prefill_s=prefill[method, ratio], decode_s=0.1, new_tokens=5,
                decode_tokens_per_s=40.0, peak_memory_bytes=None, kv_cache_bytes=1000,
            ))
    return pd.DataFrame(rows)


def test_summary_and_front_of_a_lower_is_better_task(tmp_path):
    path = tmp_path / "asr_wer.yaml"
    path.write_text("include: librispeech\nmetrics: [wer, word_accuracy]\n")
    task = load_task_file(path)
    summary = summarize(asr_results(task, tmp_path / "data"), {task.name: task})
    assert set(summary["metric"]) == {"wer"} and not summary["higher_is_better"].any()
    scores = dict(zip(summary["method"], summary["score"]))
    assert scores["none"] == 0.0 < scores["fastv"] < scores["frame"]  # more words dropped, more errors
    front = pareto_front(summary)
    assert list(front["method"]) == ["fastv", "none"], "frame is slower than fastv and worse: off the front"


def test_task_averages_keep_directions_apart(tmp_path):
    (tmp_path / "asr_wer.yaml").write_text("include: librispeech\nmetrics: [wer]\n")
    wer_task = load_task_file(tmp_path / "asr_wer.yaml")
    results = asr_results(wer_task, tmp_path / "data")
    accuracy_rows = asr_results(get_task("librispeech"), tmp_path / "data2")
    summary = summarize(pd.concat([results, accuracy_rows]), {wer_task.name: wer_task})
    averages = dict(task_averages(summary))
    assert set(averages) == {"Average over the task every method ran, lower is better",
                             "Average over the task every method ran, higher is better"}
    for title, rows in averages.items():
        expected = summary[summary["higher_is_better"] == ("higher" in title)].set_index("method")["score"]
        assert dict(zip(rows["method"], rows["score"])) == expected.to_dict()
    one_way = summarize(accuracy_rows)
    assert [title for title, _ in task_averages(one_way)] == ["Average over the task every method ran"]
