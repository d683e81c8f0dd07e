"""The STAR-Bench tasks on a fixture in the official layout: runs, prompts and golds equal the
official assembly (``benchmarks/starbench/rules.build_runs``, checked against the official code), the parser's
quirks reach the scores, and AA/ACR, their tables and the Final MA follow the official rules, worked
out by hand below."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import soundfile as sf

from kvprune.harness.tasks.benchmarks.starbench import rules as starbench
from kvprune.harness.sweep.breakdown import breakdown, suite_scores
from kvprune.harness.tasks.prompts import ClipRef
from kvprune.harness.tasks.suites import expand_suites, get_suite
from kvprune.harness.tasks.task import get_task
from tests.support import benchmark_fixtures

PARTS = {"starbench_pc": "pc", "starbench_sr": "sr", "starbench_sr_ch": "sr_ch", "starbench_tr": "tr",
         "starbench_tr_cap": "tr_cap", "starbench_tr_uncut": "tr_uncut"}
ITEMS_OF = {"pc": "pc", "sr": "sr", "sr_ch": "sr", "tr": "tr", "tr_cap": "tr", "tr_uncut": "tr"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("starbench")
    return root, benchmark_fixtures.starbench(root)


def official_segments(task, sample, root: Path) -> list[tuple[str, str]]:
    """Our rendered prompt written as the official segments: a clip of the split channel policy is the
    file the official splitter would have written for that channel."""
    split_dir = root / "STAR-Bench" / starbench.SPLIT_CHANNEL_DIR
    out = []
    for segment in task.render(sample).segments:
        if isinstance(segment, str):
            out.append(("text", segment))
        elif task.channels.policy == "split":
            out.append(("audio", str(split_dir / f"{segment.path.stem}_{('left', 'right')[segment.clip]}.wav")))
        else:
            out.append(("audio", str(segment.path)))
    return out


@pytest.mark.parametrize("name", sorted(PARTS))
def test_runs_prompts_and_golds_equal_the_official_assembly(name, data):
    root, items = data
    part, task = PARTS[name], get_task(name)
    samples = task.load(root)
    runs = [run for item in items[ITEMS_OF[part]] for run in starbench.build_runs(item, part, str(root / "STAR-Bench"))]
    assert [s.id for s in samples] == [run.unique_id for run in runs]
    assert [s.item for s in samples] == [run.item_id for run in runs]
    assert [s.choices for s in samples] == [run.options for run in runs]
    assert [f"<{s.answer}>" for s in samples] == [run.answer_letter for run in runs]
    assert [official_segments(task, s, root) for s in samples] == [list(run.segments) for run in runs]


def test_perception_runs_one_rotation_per_option_to_the_right(data):
    """Worked by hand: "the second" is B, then C after moving the last option first, then A."""
    root, _ = data
    samples = get_task("starbench_pc").load(root)
    first = [s for s in samples if s.item == "pc_pitch_1"]
    assert [s.choices for s in first] == [
        ("the first", "the second", "both equal"), ("both equal", "the first", "the second"),
        ("the second", "both equal", "the first"),
    ]
    assert [s.answer for s in first] == ["B", "C", "A"]
    # a gold text that two options hold: the first of them in each rotation
    assert [s.answer for s in samples if s.item == "pc_loud_1"] == ["A", "B", "A", "B"]
    audio = root / "STAR-Bench" / "starbench_audios" / "pc"
    assert get_task("starbench_pc").render(first[1]).segments == (
        "Audio 1:", ClipRef(audio / "p1a.wav"), "Audio 2:", ClipRef(audio / "p1b.wav"),
        "Which clip is higher?\n<A>: both equal\n<B>: the first\n<C>: the second\n",
    )
    lone = next(s for s in samples if s.item == "pc_dir_1")
    assert get_task("starbench_pc").render(lone).segments == (ClipRef(audio / "d1.wav"), "Where is the source?\n<A>: left\n<B>: right\n")
    assert get_task("starbench_pc").render(lone).system is None  # no system turn: the template's default


def test_temporal_runs_reorder_the_clips_and_recompute_the_gold(data):
    """tr_scene_TAO_4 (sub-task index 2, n = 4): run r shows CLIP_ORDERS[(4 + (r + 2) % 6) % 6], so
    orders 0, 1, 2 -> (1, 2, 3), (1, 3, 2), (2, 1, 3). Order (2, 1, 3) shows original clip 2 first:
    original clip 1 is shown as clip 2, clip 2 as clip 1 -> "clip 2 -> clip 1 -> clip 3"."""
    root, _ = data
    task = get_task("starbench_tr_uncut")
    runs = [s for s in task.load(root) if s.item == "tr_scene_TAO_4"]
    clips = root / "STAR-Bench" / "starbench_audios" / "tr"
    assert [s.meta["clip_order"] for s in runs] == ["1-2-3", "1-3-2", "2-1-3"]
    assert runs[2].audio == tuple(clips / f"tao4_{i}.wav" for i in (2, 1, 3))
    assert [s.choices[ord(s.answer) - 65] for s in runs] == [
        "clip 1 -> clip 2 -> clip 3", "clip 1 -> clip 3 -> clip 2", "clip 2 -> clip 1 -> clip 3",
    ]
    segments = task.render(runs[2]).segments
    assert segments[1:] == (
        "An uncut audio of the entire sound scene is provided:", ClipRef(clips / "tao4.wav"),
        "\n The three clips are extracted from it, please arrange them in the correct order:\n",
        "\nclip 1:", ClipRef(clips / "tao4_2.wav"), "\nclip 2:", ClipRef(clips / "tao4_1.wav"),
        "\nclip 3:", ClipRef(clips / "tao4_3.wav"),
    )


def test_the_binaural_variant_splits_the_stereo_file_and_explains_the_channels(data):
    root, _ = data
    task = get_task("starbench_sr_ch")
    sample = task.load(root)[0]
    waves, prompt = task.render(sample).load(task.channels)
    assert prompt.segments[:5] == ("Audio 1:", 0, "Audio 2:", 1, "Audio 1 is the left-ear channel and Audio 2 is the right-ear channel.\n")
    stereo, _ = sf.read(sample.audio[0], dtype="float32")
    assert [w.tolist() for w in waves] == [stereo[:, 0].tolist(), stereo[:, 1].tolist()]


@pytest.mark.parametrize(("reply", "parsed"), [
    ("The answer is (B).", "B"),
    ("answer: b", "b"),  # the keyword is case-insensitive and keeps the case: never equals "B"
    ("I think it is A, the second", "B"),  # the option's text (rank 1) beats the bare letter (rank 0)
    ("second", None),  # a one-word reply is never read as an option's text: "Z"
    ("Multiplechoice: C", "C"),  # the keyword may end a longer word
    ("(A) or maybe (B)", "B"),  # the last bracketed letter
    ("D", None),  # three options: only A-C exist
])
def test_the_parser_is_the_official_one_with_its_quirks(reply, parsed):
    choices = ("the first", "the second", "both equal")
    assert get_task("starbench_pc").parse(reply, _sample(choices)) == parsed


def _sample(choices):
    from kvprune.harness.tasks.sample import Sample

    return Sample("x", (), "q", choices, "B")


def perception_rows(root):
    """A letter-biased model: "<A>" everywhere, except "answer is (B)" on pc_dir_1@0 and "answer: b"
    (the lower-case quirk) on pc_pitch_2@0, whose gold is B."""
    task = get_task("starbench_pc")
    samples = task.load(root)
    special = {"pc_dir_1@0": "answer is (B)", "pc_pitch_2@0": "answer: b"}
    return task, benchmark_fixtures.rows_of(task, samples, [special.get(s.id, "<A>") for s in samples])


def test_perception_scores_average_sub_categories_of_rounded_scores(data):
    """Right runs: pitch 2 of 5 (pc_pitch_1@2, pc_pitch_2@1; pc_pitch_2@0 says "b"), loudness 2 of 4,
    direction 2 of 2. Sub-category AA 40.00, 50.00, 100.00 -> total (40 + 50 + 100) / 3 = 63.33
    (pooled it would be 6/11 = 54.55); ACR: only pc_dir_1 is right in every run -> 0, 0, 100 -> 33.33."""
    root, _ = data
    task, rows = perception_rows(root)
    assert [r["correct"] for r in rows if r["item"] == "pc_pitch_2"] == [0.0, 1.0]
    assert task.summarize(rows) == {"starbench_aa": 63.33, "starbench_acr": 33.33}


def test_breakdowns_are_the_official_category_and_sub_category_tables(data):
    """Acoustic = mean of pitch 40.00 and loudness 50.00 = 45.00; spatial = direction = 100.00, as
    PerceptionDataset.evaluate's "By Category" (its sub-categories' rounded scores averaged)."""
    root, items = data
    task, rows = perception_rows(root)
    table = breakdown(pd.DataFrame(rows), {task.name: task})
    got = {(r.field, r.value): (r.starbench_aa, r.starbench_acr, r.samples) for r in table.itertuples()}
    assert got == {
        ("category", "acoustic"): (45.0, 0.0, 9), ("category", "spatial"): (100.0, 100.0, 2),
        ("sub-category", "direction"): (100.0, 100.0, 2), ("sub-category", "loudness"): (50.0, 0.0, 4),
        ("sub-category", "pitch"): (40.0, 0.0, 5),
    }
    results = [starbench.RunResult(r["item"], r["meta"]["category"], r["meta"]["sub-category"], bool(r["correct"])) for r in rows]
    official = starbench.part_report("pc", results, items["pc"])
    for field, key in (("category", "By Category"), ("sub-category", "By Sub-category")):
        for value, scores in official[key].items():
            assert got[(field, value)][:2] == (scores["AA"], scores["ACR"])


def test_reasoning_parts_pool_their_runs_and_the_suite_averages_the_parts(data):
    """sr: 2 items x 3 runs; answering "<A>" is right where the gold is A. Rotating right by r puts the
    last r options first: sr_move_1's gold "left to right" (option 1 of 3) is A, B, C in runs 0, 1, 2;
    sr_count_1's "2" (option 2 of 4) is B, C, D -> 1 of 6 right, AA 16.67, ACR 0. The Final MA is the
    plain mean of the parts' AA and ACR, its samples the parts' unique items (4 + 2 + 2)."""
    root, _ = data
    task = get_task("starbench_sr")
    samples = task.load(root)
    rows = benchmark_fixtures.rows_of(task, samples, ["<A>"] * len(samples))
    assert [s.answer for s in samples] == ["A", "B", "C", "B", "C", "D"]
    assert task.summarize(rows) == {"starbench_aa": 16.67, "starbench_acr": 0.0}

    assert expand_suites(["starbench", "mmau", "starbench_pc"]) == ["starbench_pc", "starbench_sr", "starbench_tr", "mmau"]
    summary = pd.DataFrame([
        dict(model="m", task=name, method="fastv", ratio=0.5, samples=n, items=k, starbench_aa=aa, starbench_acr=acr)
        for name, n, k, aa, acr in (("starbench_pc", 11, 4, 63.33, 33.33), ("starbench_sr", 6, 2, 33.33, 0.0),
                                    ("starbench_tr", 6, 2, 50.0, 50.0))
    ])
    ma = suite_scores(summary, [get_suite("starbench")])
    expected = starbench.final_ma({p: {"AA": aa, "ACR": acr, "unique_samples": 0} for p, aa, acr in
                                   (("pc", 63.33, 33.33), ("sr", 33.33, 0.0), ("tr", 50.0, 50.0))})
    assert ma[["task", "value", "samples"]].values.tolist() == [["starbench", "Final MA", 8]]  # items, not runs
    assert ma["starbench_aa"].item() == pytest.approx(expected["AA"]) == pytest.approx((63.33 + 33.33 + 50.0) / 3)
    assert ma["starbench_acr"].item() == pytest.approx(expected["ACR"])
    assert suite_scores(summary[summary["task"] != "starbench_tr"], [get_suite("starbench")]).empty  # a part missing
