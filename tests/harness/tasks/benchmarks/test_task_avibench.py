"""AVI-Bench's audio-only tasks on fixtures in the official layout: the prompt as get_real_input writes
it after the system turn, ASQA's earliest-mentioned option, numeric answers and double confirm over
``pre_`` entries (scored at summary time over the ordered rows), AMIC's semantic F1 and counting
score; every expectation worked out by hand from the official rules."""

from __future__ import annotations

import math

import pytest

from kvprune.harness.tasks.benchmarks.avibench import rules as avibench
from kvprune.harness.tasks.prompts import ClipRef
from kvprune.harness.tasks.task import get_task
from tests.support import benchmark_fixtures


@pytest.fixture
def root(tmp_path):
    benchmark_fixtures.avibench_asqa(tmp_path)
    benchmark_fixtures.avibench_amic(tmp_path)
    return tmp_path


def test_asqa_layout_and_prompt(root):
    task = get_task("avibench_asqa")
    samples = task.load(root)
    folder = root / "AVI-Bench" / "levels" / "sensation" / "ASQA"
    assert [(s.id, s.answer, s.meta["subtask"]) for s in samples] == [
        ("00000", "sound", "sound_order"), ("pre_00000", "yes", "sound_order"), ("00001", "4", "beats_counting"),
        ("00002", "first", "sound_volume"), ("pre_00002", "yes", "sound_volume"),
    ]
    assert samples[0].choices == ("sound", "noise", "not sure")
    rendered = task.render(samples[0])
    # a null prompt is "", the resolved options are printed as a Python list
    assert rendered.segments == (
        ClipRef(folder / "input" / "00000.wav"),
        ". Available options are: ['sound', 'noise', 'not sure']. Which comes first, the sound or the noise?",
    )
    assert rendered.system == "You are a helpful assistant."
    assert task.render(samples[2]).segments[-1] == ". . How many beats?"  # null options: an empty middle part


def test_amic_prompt_resolves_the_prompt_constant(root):
    task = get_task("avibench_amic")
    sample = task.load(root)[0]
    classes = avibench.constants()["AMIC"]["amic_cls_list"]
    assert task.render(sample).segments[-1] == (
        f"{avibench.constants()['AMIC']['prompt_amic']}. Available options are: {classes}. What is sounding?"
    )
    assert sample.answer == '{"dog": 2, "cat": 1}'


ASQA_REPLIES = [
    "Sound first, then noise.",  # earliest option mentioned: "sound" -> right
    "No.",  # pre_00000: "no" -> wrong, so double confirm zeroes 00000
    "I hear 4 beats.",  # no options; the label is a number: the first number "4" -> right
    "The last one is louder, not the first.",  # earliest mention "last" -> wrong
    "Yes, I can.",  # pre_00002 right: 00002 stays as it is
]


def test_asqa_scores_the_earliest_option_and_double_confirms(root):
    """Per sample (before double confirm): 1, 0, 1, 0, 1. Formal entries 00000, 00001, 00002 score
    1, 1, 0; the wrong pre_00000 zeroes 00000 -> 1/3 = 33.333%."""
    task = get_task("avibench_asqa")
    samples = task.load(root)
    rows = benchmark_fixtures.rows_of(task, samples, ASQA_REPLIES)
    assert [r["correct"] for r in rows] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert task.summarize(rows) == {"asqa_accuracy": pytest.approx(100 * round(1 / 3, 5))}
    # the rows come in any order (resumed or multi-process sweeps): they are put back in data.json order
    assert task.summarize(rows[::-1]) == task.summarize(rows)


def test_asqa_skips_entries_without_a_reply(root):
    """A failed sample has no reply: the official pairing skips it. Without pre_00000's reply nothing
    zeroes 00000: formal 1, 1, 0 -> 66.667%."""
    task = get_task("avibench_asqa")
    samples = task.load(root)
    replies = list(ASQA_REPLIES)
    replies[1] = None
    assert task.summarize(benchmark_fixtures.rows_of(task, samples, replies)) == {"asqa_accuracy": pytest.approx(66.667)}
    assert math.isnan(task.summarize(benchmark_fixtures.rows_of(task, samples, [None] * 5))["asqa_accuracy"])


def test_amic_semantic_f1_and_counting_score(root):
    """10000: {dog, cat} named -> F1 1; counts off by 0 and 2 -> mean error 1. 10001: not JSON ->
    F1 0, and its gold counts are its errors -> 1. Semantic 0.5; RMSE 1; counting 1 - tanh(0.3);
    average their mean (each rounded to 5 decimals, as the evaluator rounds)."""
    task = get_task("avibench_amic")
    samples = task.load(root)
    rows = benchmark_fixtures.rows_of(task, samples, ["answer={'dog': 2, 'cat': 3}", "I hear a piano."])
    counting = 1 - math.tanh(0.3)
    assert task.summarize(rows) == pytest.approx({
        "amic_average": 100 * round((0.5 + counting) / 2, 5), "amic_semantic": 50.0, "amic_counting": 100 * round(counting, 5),
    })
    # counting is forced to 0 when no reply names a right class
    nothing = benchmark_fixtures.rows_of(task, samples, ["answer={'bus': 1}", "answer={'harp': 1}"])
    assert task.summarize(nothing) == {"amic_average": 0.0, "amic_semantic": 0.0, "amic_counting": 0.0}


def test_the_reports_say_the_refine_step_is_not_run():
    for name in ("avibench_asqa", "avibench_amic"):
        assert "refine step is not run" in get_task(name).notes
