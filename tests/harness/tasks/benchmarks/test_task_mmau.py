"""MMAU test-mini and MMAR as tasks: their layouts (JSON list, JSON lines), every item of the shipped
official metadata loads and its own gold text scores 100%, the reply is scored whole by the official
string_match against the gold TEXT (worked out by hand below), and the breakdowns are the official
script's tables."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

from kvprune.harness.tasks.benchmarks.mmau import rules as mmau
from kvprune.harness.scoring.records import read_records
from kvprune.harness.sweep.breakdown import breakdown
from kvprune.harness.tasks.task import get_task
from tests.support import benchmark_fixtures
from tests.support.paths import OFFICIAL_DATA

FILES = {"mmau": ("MMAU", "mmau-test-mini.json", "audio_id"), "mmar": ("MMAR", "MMAR-meta.jsonl", "audio_path")}


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    """The shipped official metadata of both benchmarks in their task folders, every audio path a
    link to one short file."""
    root = tmp_path_factory.mktemp("official")
    clip = benchmark_fixtures.write_channels(root / "clip.wav", seconds=0.05)
    for name, (folder, metadata, audio_key) in FILES.items():
        (root / folder).mkdir()
        (root / folder / metadata).write_bytes(gzip.decompress((OFFICIAL_DATA / f"{metadata}.gz").read_bytes()))
        for record in read_records(root / folder / metadata):
            link = root / folder / record[audio_key]
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(clip)
    return root


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_official_item_loads_and_its_own_gold_text_scores_100(name, official):
    folder, metadata, _ = FILES[name]
    task = get_task(name)
    samples = task.load(official)
    records = read_records(official / folder / metadata)
    assert len(samples) == len(records) == 1000
    assert [s.id for s in samples] == [str(r["id"]) for r in records]
    assert [s.answer for s in samples] == [r["answer"] for r in records]  # the gold TEXT, no letter
    rows = benchmark_fixtures.rows_of(task, samples, [s.answer for s in samples])
    assert task.summarize(rows) == {"string_match": 100.0}
    if name == "mmau":  # the 16 items whose gold equals several options load and score like the others
        repeated = [s for s in samples if s.choices.count(s.answer) > 1]
        assert len(repeated) == 16


@pytest.mark.parametrize("name", sorted(FILES))
def test_breakdowns_are_the_official_scripts_tables(name, official):
    """Gold text for two items in three, the first wrong option's text otherwise: every cell of our
    breakdown equals the official printout (accuracy_report), rows the official table has but no
    item fills (0 %) aside."""
    task = get_task(name)
    samples = task.load(official)
    wrong = lambda s: next((c for c in s.choices if mmau.tokenize(c) != mmau.tokenize(s.answer) and c), "")  # noqa: E731
    replies = [s.answer if i % 3 else wrong(s) for i, s in enumerate(samples)]
    rows = benchmark_fixtures.rows_of(task, samples, replies)
    table = breakdown(pd.DataFrame(rows), {task.name: task})
    items = mmau.read_items(official / FILES[name][0] / FILES[name][1])
    report = mmau.accuracy_report(items, {s.id: r for s, r in zip(samples, replies)},
                                  mmau.MMAU_TABLES if name == "mmau" else mmau.MMAR_TABLES)
    assert task.summarize(rows)["string_match"] == pytest.approx(report["total"][2])
    ours = {(r.field, r.value): (r.samples, r.string_match) for r in table.itertuples()}
    official_cells = {(field, value): (n, pct) for field in task.breakdown_by for value, (_, n, pct) in report[field].items() if n}
    assert ours.keys() == official_cells.keys()
    for key, (n, pct) in official_cells.items():
        assert ours[key][0] == n and ours[key][1] == pytest.approx(pct)


@pytest.fixture
def fixture_root(tmp_path):
    benchmark_fixtures.mmau(tmp_path)
    benchmark_fixtures.mmar(tmp_path)
    return tmp_path


def test_the_layouts_and_our_prompt(fixture_root):
    mmau_samples = get_task("mmau").load(fixture_root)
    assert [(s.id, s.answer) for s in mmau_samples] == [("m-1", "barking"), ("m-2", "piano"), ("m-3", "Mono first, stereo later")]
    assert mmau_samples[0].meta == {"task": "sound", "difficulty": "easy", "sub-category": "animals", "category": "Sound", "dataset": "toy"}
    assert mmau_samples[0].audio == (fixture_root / "MMAU" / "test-mini-audios" / "m-1.wav",)
    assert get_task("mmau").render(mmau_samples[0]).text == (
        "What is the dog doing?\nOptions:\n- barking\n- sleeping\n- eating\n- running\n"
        "Answer with the exact text of the correct option, not a letter."
    )
    mmar_samples = get_task("mmar").load(fixture_root)
    assert [(s.id, s.choices, s.answer) for s in mmar_samples] == [("r-1", ("one", "two", ""), "two"), ("r-2", ("jazz", "rock"), "rock")]
    assert mmar_samples[0].meta["modality"] == "speech"


@pytest.mark.parametrize(("index", "reply", "right"), [
    (0, "The dog is barking.", True),  # every gold token, no token of a wrong option
    (0, "B", False),  # a bare letter: "b" is no option's token -> the gold token is missing
    (0, "barking or sleeping", False),  # "sleeping" is a wrong option's token
    (1, "It is a piano.", True),  # gold equal to options A and C: one set of tokens
    (2, "Stereo first, mono later", True),  # another option with the gold's token set counts as right
    (2, "Only mono first", False),  # "stereo", "later" missing; "only" is a wrong option's token
    (2, "", False),
])
def test_the_raw_reply_is_scored_by_string_match(fixture_root, index, reply, right):
    task = get_task("mmau")
    sample = task.load(fixture_root)[index]
    assert task.parse(reply, sample) == reply
    assert task.score(task.parse(reply, sample), sample) == {"correct": float(right)}


def test_answer_span_scores_the_last_answer_tags_only(fixture_root, tmp_path):
    own = tmp_path / "mmau_reasoning.yaml"
    own.write_text("include: mmau\nparser: answer_span\n")
    task = get_task(str(own))
    sample = task.load(fixture_root)[0]
    reply = "Maybe sleeping? No. <answer>sleeping</answer> ... <answer>barking</answer>"
    assert task.score(task.parse(reply, sample), sample) == {"correct": 1.0}
    assert get_task("mmau").score(reply, sample) == {"correct": 0.0}  # the whole reply names a wrong option
