"""STAR-Bench protocol and scores, each expectation worked out by hand from the official rules
(ALMEval_code/datasets/starbench.py and run.py), the reasoning beside it."""

from __future__ import annotations

import pytest

from kvprune.harness.tasks.benchmarks.starbench.rules import (
    NO_ANSWER,
    RunResult,
    build_runs,
    clip_order,
    final_ma,
    parse_answer,
    part_report,
    rotate,
    temporal_answer,
)

OPTIONS = ["left", "right", "front", "back"]  # letters A-D


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        # keyword "answer", ": ", then a bare letter; the keyword pattern is case-insensitive and the
        # letter is returned as written: "<b>", which never equals the gold "<B>".
        ("answer: b", "<b>"),
        ("Answer: B", "<B>"),
        ("ANSWER: d", "<d>"),
        # two keyword hits of the same (bare) rank: the last one wins
        ("Option A and option C", "<C>"),
        # one word: option texts are only looked for in replies of more than two words -> no hit
        ("right", NO_ANSWER),
        ("it is right", "<B>"),  # three words: "right" is option B's text
        ("", NO_ANSWER),
        ("E", NO_ANSWER),  # only A-D exist for four options
        # no keyword: the bare letter B ranks 0, the option text "Left" ranks 1 -> A
        ("I think it is B. Left", "<A>"),
        # a bracketed letter (rank 2) beats a bare one (rank 0) wherever it stands
        ("(B) but maybe A", "<B>"),
        # only keyword hits count once there is one: (C) after "Answer:", (D) is ignored
        ("Answer: (C), not (D)", "<C>"),
        # "<answer>" is a keyword, then C stands alone between ">" and "<"
        ("<answer>C</answer>", "<C>"),
        # the keyword may end a longer word
        ("Multiplechoice: B", "<B>"),
        # "a" after a keyword counts even as an article
        ("choice a dog", "<a>"),
    ],
)
def test_parse_answer(reply, parsed):
    assert parse_answer(reply, OPTIONS) == parsed


def test_rotations_move_the_last_options_to_the_front():
    # gold "front" (index 2): r=0 keeps the order (<C>); r=1 -> [back, left, right, front] (<D>);
    # r=2 -> [front, back, left, right] (<A>); r=3 -> [right, front, back, left] (<B>)
    item = {"id": "p1", "task": "foundation_perception", "question": "Where?", "options": OPTIONS,
            "answer": "front", "audio_paths": ["a.wav"]}
    runs = build_runs(item, "pc", "/root")
    assert [r.answer_letter for r in runs] == ["<C>", "<D>", "<A>", "<B>"]
    assert runs[1].options == ("back", "left", "right", "front")
    assert [r.unique_id for r in runs] == ["p1@0", "p1@1", "p1@2", "p1@3"]
    assert rotate(["x", "y"], 0) == ("x", "y")
    # a lone clip has no label; the text comes after the audio
    question = "Where?\n<A>: left\n<B>: right\n<C>: front\n<D>: back\n"
    assert runs[0].segments == (("audio", "/root/a.wav"), ("text", question))
    assert len(build_runs(item, "sr", "/root")) == 3  # reasoning parts: 3 rotations
    assert len(build_runs(item, "pc", "/root", robust=False)) == 1


def test_several_clips_are_labelled_and_channel_split_audio_is_flat():
    item = {"id": "s1", "task": "holistic_reasoning_spatial", "question": "Q", "options": ["x", "y"], "answer": "y",
            "audio_paths": ["sp/one.wav", "sp/two.wav"]}
    assert build_runs(item, "sr", "R")[0].segments[:4] == (
        ("text", "Audio 1:"), ("audio", "R/sp/one.wav"), ("text", "Audio 2:"), ("audio", "R/sp/two.wav"))
    item["audio_paths"] = ["sp/deep/one.wav"]
    split = "R/starbench_audios/holistic_reasoning/spatial_split"
    assert build_runs(item, "sr_ch", "R")[0].segments[:5] == (
        ("text", "Audio 1:"), ("audio", f"{split}/one_left.wav"),
        ("text", "Audio 2:"), ("audio", f"{split}/one_right.wav"),
        ("text", "Audio 1 is the left-ear channel and Audio 2 is the right-ear channel.\n"))


ORDERS = ["clip 1 -> clip 2 -> clip 3", "clip 1 -> clip 3 -> clip 2", "clip 2 -> clip 1 -> clip 3",
          "clip 2 -> clip 3 -> clip 1", "clip 3 -> clip 1 -> clip 2", "clip 3 -> clip 2 -> clip 1"]


def test_temporal_permutations_and_recomputed_golds():
    # id ..._TAO_7: TAO is sub-task 2. Run r uses permutation (7 + (r + 2) % 6) % 6 = 3, 4, 5:
    # (2, 3, 1), (3, 1, 2), (3, 2, 1) = the original clip shown as clip 1, 2, 3.
    assert [clip_order("x_TAO_7", r) for r in range(3)] == [(2, 3, 1), (3, 1, 2), (3, 2, 1)]
    # (2, 3, 1): original clip 1 is shown third, clip 2 first, clip 3 second -> "clip 3 -> clip 1 -> clip 2"
    assert temporal_answer((2, 3, 1)) == "clip 3 -> clip 1 -> clip 2"
    item = {"id": "x_TAO_7", "task": "holistic_reasoning_temporal", "question": "Order?", "options": ORDERS,
            "answer": ORDERS[0], "audio_paths": ["c1.wav", "c2.wav", "c3.wav"], "global_caption": "rain",
            "uncut_audio_path": "all.wav"}
    runs = build_runs(item, "tr", "R")
    assert [r.answer for r in runs] == [ORDERS[4], ORDERS[3], ORDERS[5]]
    assert [r.answer_letter for r in runs] == ["<E>", "<D>", "<F>"]  # their indices in ORDERS
    assert [r.clip_order for r in runs] == ["2-3-1", "3-1-2", "3-2-1"]
    # the question first, then each clip after "\nclip i:", in the permuted order
    assert runs[0].segments[1:] == (("text", "\nclip 1:"), ("audio", "R/c2.wav"), ("text", "\nclip 2:"),
                                    ("audio", "R/c3.wav"), ("text", "\nclip 3:"), ("audio", "R/c1.wav"))
    caption = build_runs(item, "tr_cap", "R")[0].segments[1]
    assert caption == ("text", "Here is a caption that describes the full, uncut audio scene to help you reconstruct "
                               "the original context: rain\n Below are 3 audio clips:\n")
    assert build_runs(item, "tr_uncut", "R")[0].segments[1:4] == (
        ("text", "An uncut audio of the entire sound scene is provided:"), ("audio", "R/all.wav"),
        ("text", "\n The three clips are extracted from it, please arrange them in the correct order:\n"))
    with pytest.raises(ValueError, match="must end in"):
        clip_order("x_NOPE_1", 0)


def _results(spec):
    """spec: (item, category, sub-category, runs as a string of T/F)."""
    return [RunResult(i, c, s, r == "T") for i, c, s, runs in spec for r in runs]


def test_perception_averages_rounded_subcategories():
    results = _results([("p1", "P", "s1", "TTF"), ("p2", "P", "s2", "FFT"), ("p3", "Q", "s3", "TT")])
    items = [{"id": "p1", "options": "abc"}, {"id": "p2", "options": "abc"}, {"id": "p3", "options": "ab"}]
    report = part_report("pc", results, items)
    # s1: AA 2/3 -> 66.67, ACR 0; s2: AA 1/3 -> 33.33, ACR 0; s3: AA 100, ACR 100
    assert report["By Sub-category"]["s1"] == {"AA": 66.67, "ACR": 0.0, "total_runs": 3, "unique_samples": 1}
    assert report["By Sub-category"]["s2"]["AA"] == 33.33
    # P = mean(66.67, 33.33) = 50.00; Q = 100
    assert report["By Category"]["P"] == {
        "AA": 50.0, "ACR": 0.0, "n_subcategories": 2, "total_runs": 6, "unique_samples": 2}
    assert report["By Category"]["Q"]["AA"] == 100.0
    # total = mean over the three sub-categories: AA (66.67 + 33.33 + 100) / 3 = 66.67 (pooled would be
    # 5/8 = 62.5); ACR (0 + 0 + 100) / 3 = 33.33
    assert report["Total"] == {"AA": 66.67, "ACR": 33.33, "n_subcategories": 3, "total_runs": 8, "unique_samples": 3}


def test_reasoning_pools_runs_and_ma_averages_parts():
    results = _results([("t1", "X", "OSM", "TTT"), ("t2", "X", "TAO", "TFT"), ("t3", "Y", "TAO", "FFF")])
    items = [{"id": i, "options": ORDERS} for i in ("t1", "t2", "t3")]
    report = part_report("tr", results, items)
    # AA 5/9 = 55.56; ACR 1/3 = 33.33
    assert report["Total"] == {"AA": 55.56, "ACR": 33.33, "total_runs": 9, "unique_samples": 3}
    assert report["By Category"] == {"X": {"AA": 83.33, "ACR": 50.0, "total_runs": 6, "unique_samples": 2},
                                     "Y": {"AA": 0.0, "ACR": 0.0, "total_runs": 3, "unique_samples": 1}}
    assert report["By Sub-category"]["TAO"] == {"AA": 33.33, "ACR": 0.0, "total_runs": 6, "unique_samples": 2}
    totals = {"pc": {"AA": 66.67, "ACR": 33.33, "unique_samples": 3}, "tr": report["Total"],
              "sr": {"AA": 50.0, "ACR": 0.0, "unique_samples": 4}}
    ma = final_ma(totals)
    # AA (66.67 + 55.56 + 50.00) / 3 = 57.41; ACR (33.33 + 33.33 + 0) / 3 = 22.22; samples 3 + 3 + 4
    assert ma["AA"] == pytest.approx(57.41) and ma["ACR"] == pytest.approx(22.22) and ma["Samples"] == 10


def test_incomplete_run_sets_are_refused():
    items = [{"id": "t1", "options": ORDERS}]
    with pytest.raises(ValueError, match="t1: 2 of 3"):
        part_report("tr", _results([("t1", "X", "OSM", "TT")]), items)
    with pytest.raises(ValueError, match="p1: 1 of 2"):  # perception expects a run per option even when not robust
        part_report("pc", _results([("p1", "P", "s", "T")]), [{"id": "p1", "options": "ab"}], robust=False)


def test_part_groups_expand_as_the_official_build_dataset():
    from kvprune.harness.tasks.benchmarks.starbench.rules import PART_GROUPS, PARTS, expand_parts

    assert expand_parts(["starbench_default"]) == ["pc", "tr", "sr"]
    assert expand_parts(["starbench_all"]) == ["tr", "tr_cap", "tr_uncut", "sr", "sr_ch", "pc_sp", "pc_nsp"]
    # '+' joins names; case and spaces do not matter; a part already named is not repeated
    assert expand_parts(["TR + sr", "temporal_all", "pc"]) == ["tr", "sr", "tr_cap", "tr_uncut", "pc"]
    assert expand_parts(["perception_all"]) == ["pc_sp", "pc_nsp"] and set(PART_GROUPS["starbench_all"]) < set(PARTS)
    with pytest.raises(ValueError, match=r"group 'spatial_all' names \['sp', 'sp_ch'\], which are not parts"):
        expand_parts(["spatial_all"])
    with pytest.raises(ValueError, match="unknown part 'sp'"):
        expand_parts(["tr+sp"])


def test_final_ma_over_a_group_averages_its_parts():
    totals = {"tr": {"AA": 50.0, "ACR": 20.0, "unique_samples": 10}, "tr_cap": {"AA": 40.0, "ACR": 10.0, "unique_samples": 10},
              "tr_uncut": {"AA": 60.0, "ACR": 30.0, "unique_samples": 10}}
    assert final_ma(totals) == {"AA": 50.0, "ACR": 20.0, "Samples": 30}
