"""The audiomarathon protocol: each task under it asks as AudioMarathon's Qwen2.5-Omni scripts ask
(system turn, user text), extracts and scores as they do (unparsed answers dropped before F1, HAD's
binary F1 with fake positive, their ASR normalisation), and every press counts kept tokens by their
rule. Expected texts are copied from the scripts; scores are worked out by hand."""

from __future__ import annotations

import pytest
import torch

from kvprune import FramePress, get_press, parse_methods
from kvprune.harness.sweep.config import SweepConfig
from kvprune.harness.sweep.plan import load_tasks, runs_of
from kvprune.harness.tasks.config_files import TaskConfigError
from kvprune.harness.tasks.sample import Sample
from kvprune.harness.tasks.task import get_task
from kvprune.keep_rules import frame_offsets, keep_count
from tests.support import benchmark_fixtures, task_fixtures
from tests.support.helpers import GREEDY, K, clip_positions, model
from tests.support.tiny_models import FAMILIES

QWEN = ("You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of perceiving auditory "
        "and visual inputs, as well as generating text and speech.")


def am(name: str):
    return get_task(name).under("audiomarathon")


def test_the_protocol_is_a_named_variant_of_each_audiomarathon_task():
    task = am("slue")
    assert (task.name, task.protocol, task.max_new_tokens, task.parser) == ("slue@audiomarathon", "audiomarathon", 5, "audiomarathon_ser")
    assert am("vesus").max_new_tokens == 10 and am("librispeech").max_new_tokens == 1100
    assert get_task("slue").under("kvprune") is not None and get_task("slue").protocol == "kvprune"
    with pytest.raises(TaskConfigError, match=r"task mmau has no 'audiomarathon' protocol \(it has: official\)"):
        get_task("mmau").under("audiomarathon")


@pytest.mark.parametrize(("name", "system", "text"), [
    ("slue", QWEN,
     "You are a helpful assistant that analyzes speech audio for named entity recognition. Please listen carefully and "
     "extract the requested named entities from the speech.\n\nQuestion 0?\n\nA. Paris\nB. Obama\nC. London\nD. Nike\n\n"
     "Please listen to the audio and select the correct answer. Reply with only the letter (A, B, C, or D)."),
    ("tau", QWEN,
     "You are a helpful assistant that analyzes urban soundscape audio to identify acoustic scenes. Please listen to the "
     "audio carefully and classify the scene type.\n\nListen to this audio and identify the acoustic scene. Choose the "
     "most appropriate option.\nA: Airport\nB: Park\nC: Metro station\nD: Bus\nRespond with only the letter of your "
     "answer (A, B, C, or D)."),
    ("desed", "You are a helpful assistant that analyzes audio to detect and classify sound events. Please listen "
     "carefully and select the most appropriate answer from the given choices.",
     "Which sound occurs?\n\nA. Dog\nB. Blender\nC. Cat\nD. Dishes\n\nPlease listen to the audio and select the correct "
     "answer. Reply with only the letter (A, B, C, or D)."),
    ("had", "You are a helpful assistant that analyzes audio to determine authenticity.",
     "Listen to this audio clip carefully. Is this audio completely authentic (real) or does it contain any artificially "
     "synthesized segments (fake)? If it is completely real, answer 'a'. If it contains any fake segments, answer 'b'. "
     "Answer with only 'a' or 'b'."),
    ("gtzan", f"{QWEN} You are a helpful audio analysis assistant.",
     "Listen to this audio segment and identify the music genre based on what you hear.\n\nQuestion: Question 0?\n\n"
     "Options:\nA. Blues\nB. Jazz\nC. Rock\nD. Pop\n\nRespond with only the letter of the correct option (A, B, C, or D)."),
])
def test_prompts_are_the_scripts(name, system, text, tmp_path):
    task_fixtures.WRITERS[name](tmp_path)
    task = am(name)
    rendered = task.render(task.load(tmp_path)[0])
    assert rendered.system == system
    assert rendered.segments[1:] == (text,)  # the audio, then the user text


def rows_for(task, samples, replies):
    return benchmark_fixtures.rows_of(task, samples, replies)


def test_unparsed_answers_are_dropped_before_f1(tmp_path):
    """SER, golds A, B, A, B (the fixture's two items, twice). Their extractor: "A" -> A; "xyz" -> ""
    (no A-D anywhere); "Bb" -> B (at most 3 characters: the first); "CAB" -> C. Pairs kept (both
    valid letters): (A, A), (A, B), (B, C) -> accuracy 1/3; F1 over the labels present: A 2/3, B 0,
    C 0 -> macro 22.22; right of all four (their progress bar): 1/4. kvprune's parser reads none of
    the last three, and counts them wrong: accuracy 1/4."""
    task_fixtures.slue(tmp_path)
    task = am("slue")
    samples = task.load(tmp_path) * 2
    assert [s.answer for s in samples] == ["A", "B", "A", "B"]
    replies = ["A", "xyz", "Bb", "CAB"]
    rows = rows_for(task, samples, replies)
    assert [r["parsed"] for r in rows] == ["A", "", "B", "C"]
    summary = task.summarize(rows)
    assert summary["audiomarathon_accuracy"] == pytest.approx(100 / 3)
    assert summary["audiomarathon_f1_macro"] == pytest.approx(100 * (2 / 3) / 3)
    assert summary["audiomarathon_correct_rate"] == pytest.approx(25.0)
    ours = get_task("slue")
    ours_rows = rows_for(ours, ours.load(tmp_path) * 2, replies)
    assert [r["parsed"] for r in ours_rows] == ["A", None, None, None]
    assert ours.summarize(ours_rows)["accuracy"] == pytest.approx(25.0)


def test_had_headlines_binary_f1_with_fake_positive(tmp_path):
    """Golds real, real, fake, fake (folders). Replies "a" -> real, "The audio is fake." -> fake,
    "b" -> fake, "" -> nothing. TP 1 (fake->fake), FP 1 (real answered fake), FN 1 (fake unanswered):
    P = R = 1/2 -> F1 50, counted over every sample."""
    task_fixtures.had(tmp_path, real=2, fake=2)
    task = am("had")
    samples = task.load(tmp_path)
    assert [s.answer for s in samples] == ["real", "real", "fake", "fake"]
    rows = rows_for(task, samples, ["a", "The audio is fake.", "b", ""])
    assert [r["parsed"] for r in rows] == ["real", "fake", "fake", ""]
    assert task.primary_metric == "audiomarathon_f1_fake"
    assert task.summarize(rows)["audiomarathon_f1_fake"] == pytest.approx(50.0)


def test_asr_uses_their_normalisation_and_drops_empty_transcripts():
    """Their standardize_text deletes hyphens: "WELL-KNOWN" -> "wellknown" against "well known": one
    substitution and one insertion over 3 words (66.67 %), where kvprune's normalisation finds none.
    An empty transcript is left out of the mean (100 - 66.67)."""
    task = am("librispeech")
    samples = [Sample("u1", (), "", (), "A WELL-KNOWN MAN"), Sample("u2", (), "", (), "ANOTHER ONE")]
    rows = rows_for(task, samples, ["Spoken Content: a well known man", ""])
    assert rows[0]["am_wer"] == pytest.approx(200 / 3)
    summary = task.summarize(rows)
    assert summary == pytest.approx({"audiomarathon_word_accuracy": 100 - 200 / 3, "audiomarathon_wer": 200 / 3})
    ours = get_task("librispeech")
    assert ours.score(ours.parse("Spoken Content: a well known man", samples[0]), samples[0])["errors"] == 0


def test_a_sweep_under_the_protocol_gives_every_press_its_keep_rule(tmp_path):
    config = SweepConfig(models=["demo"], tasks=["had", "slue"], methods=parse_methods("frame,fastv:keep_rule=round"),
                         ratios=[0.3], data_root=tmp_path, protocol="audiomarathon")
    assert [(r.method, getattr(r.press, "keep_rule", None)) for r in runs_of(config)] == [
        ("none", None), ("frame", "floor"), ("fastv:keep_rule=round", "round"),  # a press's own rule stays
    ]
    assert [t.name for t in load_tasks(["had", "slue"], "audiomarathon")] == ["had@audiomarathon", "slue@audiomarathon"]
    with pytest.raises(ValueError, match="protocol='amarathon' is unknown"):
        SweepConfig.build(models=["demo"], tasks=["had"], data_root=tmp_path, protocol="amarathon")


@pytest.mark.parametrize(("n", "ratio", "floor", "rounded"), [(7, 0.5, 3, 4), (25, 0.3, 17, 18), (25, 0.7, 7, 8), (10, 0.95, 1, 1)])
def test_keep_counts_by_rule(n, ratio, floor, rounded):
    assert (keep_count(n, ratio, "floor"), keep_count(n, ratio, "round")) == (floor, rounded)


def test_frame_keeps_audiomarathons_offsets_under_the_floor_rule():
    """30 tokens keeping 22 (ratio 0.25: 22.5 -> 22 by either rule): the float step 30/22 makes offset
    11 int(11 * 1.3636...) = 14, where the exact 11 * 30 // 22 = 15."""
    assert frame_offsets(30, 22, "floor")[11] == 14 and frame_offsets(30, 22, "round")[11] == 15
    family = FAMILIES["qwen2_5_omni"]
    m = model("qwen2_5_omni", "sdpa")
    rows = [[("text", 3), ("audio", 30), ("text", 3)]]
    inputs = family.inputs(rows)
    start = int(clip_positions("qwen2_5_omni", rows)[0][0][0])
    kept = {}
    for rule in ("round", "floor"):
        with torch.no_grad(), FramePress(layer=K, keep_rule=rule)(m, ratio=0.25) as outcome:
            m.generate(**inputs, max_new_tokens=2, **GREEDY)
        kept[rule] = (outcome.kept_positions[0] - start).tolist()
    assert kept == {"round": frame_offsets(30, 22, "round"), "floor": frame_offsets(30, 22, "floor")}
    with torch.no_grad(), get_press("fastv", layer=K, keep_rule="floor")(m, ratio=0.3) as outcome:
        m(**family.inputs([[("text", 3), ("audio", 25), ("text", 3)]]))
    assert outcome.stats[0].kept_tokens == 17
