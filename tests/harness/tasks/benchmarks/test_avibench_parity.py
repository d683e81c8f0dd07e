"""AVI-Bench's scorers against an independent transcription of the official evaluator
(tests/support/avibench_official.py), on hundreds of synthetic entries from a seeded generator, edge cases
included (empty and missing replies, pre-questions, malformed dicts and boxes, ties): exact equality."""

from __future__ import annotations

import json
import random

import pytest

from kvprune.harness.tasks.benchmarks.avibench import rules as avibench
from kvprune.harness.tasks.benchmarks.avibench.grounding import score_avl, score_avlg
from kvprune.harness.tasks.benchmarks.avibench.retrieval import score_retrieval
from tests.support import avibench_official as official

SEEDS = range(8)
# an entry with no gold class gives the official numpy an empty mean (NaN, then capped): same warning here
pytestmark = pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value encountered")


def entry(task, entry_id, answer, options=None, text="Q?", prompt=None):
    question = {"prompt": prompt, "text": text, "options": options}
    return {"id": entry_id, "task": task, "subtask": None, "input": {"question": question}, "output": {"question_answer": answer}}


def noisy(rng, core):
    """A reply around ``core``: decorations, case, punctuation, end-of-text markers."""
    return rng.choice(["", "The answer is ", "**", "I think: ", "answer="]) + core + rng.choice(
        ["", ".", "!", "**", "<|endoftext|>", " because it is.", ", not sure"])


# -- full match, pooled VSQA, AVSQA -----------------------------------------------------------------

FULL_MATCH_OPTIONS = {
    "ASQA": ["options_yes_no", "options_sound_volume", None, "options_sound_order"],
    "VSQA_I": ["get_from_color", "get_from_space_hard", "get_yes_no", None, "options_yes_no"],
    "VSQA_V": ["what_shape", "spacial_change", "which_object", None],
    "AVM": ["avm_options_list"], "AVH": ["avh_options_list"], "VAH": ["vah_options_list"],
    "AVQA": ["avqa_options_list_is", None, "avqa_cls_list", "yes-or-no"],  # a literal string: searched by character
}


def full_match_set(rng, task, n=60):
    entries, replies = [], []
    for i in range(n):
        key = rng.choice(FULL_MATCH_OPTIONS[task])
        table = avibench.constants()[task]
        choices = table.get(key) if key in table else None
        answer = rng.choice(choices) if choices else str(rng.randint(0, 12))
        entry_id = f"{i:05d}"
        entries.append(entry(task, entry_id, answer, key))
        pool = (choices or []) + [str(rng.randint(0, 15)), "nothing", f"{rng.randint(0, 15)} and {rng.randint(0, 15)}"]
        core = rng.choice(pool) + (f" or {rng.choice(pool)}" if rng.random() < 0.3 else "")
        replies.append(rng.choice([None, "", noisy(rng, core), noisy(rng, core.upper())]) if rng.random() < 0.2 else noisy(rng, core))
        if rng.random() < 0.4:  # a pre-question after its formal entry (some with a null question or answer)
            pre_text = None if rng.random() < 0.2 else "Can you perceive anything?"
            pre_answer = None if rng.random() < 0.1 else "yes"
            entries.append(entry(task, f"pre_{entry_id}", pre_answer, "options_yes_no" if "options_yes_no" in table else None,
                                 text=pre_text))
            replies.append(noisy(rng, rng.choice(["yes", "no", "not sure", "Yes"])))
    if rng.random() < 0.5:
        replies = replies[: -rng.randint(1, 5)]  # a partial prediction file
    return entries, replies


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("task", list(FULL_MATCH_OPTIONS))
def test_full_match_tasks_agree_with_the_official_evaluator(task, seed):
    rng = random.Random(f"{task}-{seed}")
    entries, replies = full_match_set(rng, task)
    for confirm in (True, False):
        assert avibench.score_full_match(entries, replies, confirm) == official.eval_full_match_acc(entries, replies, confirm)


@pytest.mark.parametrize("seed", SEEDS)
def test_pooled_vsqa_agrees_with_the_official_merge(seed):
    rng = random.Random(f"vsqa-{seed}")
    (di, pi), (dv, pv) = full_match_set(rng, "VSQA_I", 40), full_match_set(rng, "VSQA_V", 40)
    pi, pv = pi + [None] * (len(di) - len(pi)), pv + [None] * (len(dv) - len(pv))
    for e in dv[:5]:  # the same ids in both halves must not collide
        e["id"] = di[0]["id"] if not e["id"].startswith("pre_") else e["id"]
    assert avibench.score_vsqa((di, pi), (dv, pv)) == official.pooled_vsqa(di, pi, dv, pv)


def test_pooled_vsqa_refuses_a_short_half():
    e = [entry("VSQA_I", "00000", "yes", "options_yes_no")]
    with pytest.raises(ValueError, match="VSQA_I: 1 entries but 0 reply slots"):
        avibench.score_vsqa((e, []), (e, ["yes"]))


AVSQA_WORDS = ["cube", "pyramid", "cone", "sphere", "red", "blue", "green", "not sure"]


@pytest.mark.parametrize("seed", SEEDS)
def test_avsqa_agrees_with_the_official_evaluator(seed):
    rng = random.Random(f"avsqa-{seed}")
    entries, replies = [], []
    for i in range(80):
        gold = rng.sample(AVSQA_WORDS, rng.randint(1, 3))
        label = ";".join(rng.choice([w, w.upper(), f" {w} "]) for w in gold) if rng.random() < 0.9 else None
        entries.append(entry("AVSQA", f"{i:05d}", label, "avsqa_options_list_object", prompt="prompt_avsqa"))
        picked = rng.sample(gold, len(gold)) if rng.random() < 0.6 else rng.sample(AVSQA_WORDS, rng.randint(1, 3))
        reply = rng.choice([";", "; ", " ;"]).join(picked)
        replies.append(rng.choice([f"#{reply}#", f"**{reply}**", reply, reply.title(), None, "", "none"]))
        if rng.random() < 0.4:
            text = None if rng.random() < 0.2 else "Can you hear any sound?"
            entries.append(entry("AVSQA", f"pre_{i:05d}", "yes", "avsqa_options_list_object", text=text))
            replies.append(rng.choice(["#yes#", "**Yes**", "no", "yes;no"]))
    for confirm in (True, False):
        assert avibench.score_avsqa(entries, replies, confirm) == official.eval_avsqa(entries, replies, confirm)


# -- AMIC / VMIC ------------------------------------------------------------------------------------

def mic_set(rng, task, n=70):
    classes = avibench.constants()[task][f"{task.lower()}_cls_list"][:12]
    entries, replies = [], []
    for i in range(n):
        gold = {c: rng.choice([rng.randint(1, 4), str(rng.randint(1, 14)), rng.randint(9, 14)]) for c in rng.sample(classes, rng.randint(0, 3))}
        entries.append(entry(task, f"{i:05d}", gold, f"{task.lower()}_cls_list"))
        predicted = {c: rng.choice([rng.randint(0, 15), str(rng.randint(1, 12)), "many"]) for c in rng.sample(classes, rng.randint(0, 4))}
        if gold and rng.random() < 0.5:
            predicted.update({c: rng.choice([v, rng.randint(10, 30)]) for c, v in gold.items() if rng.random() < 0.7})
        text = json.dumps(predicted)
        replies.append(rng.choice([
            text, text.replace('"', "'"), f"answer={text}", f" Answer= {text}", f"```json\n{text}\n```", "[1, 2]", "3",
            "a dog and two cats", "{}", json.dumps({f"class{k}": k for k in range(40)}), None, "", "{'dog's': 1}",
        ]))
    return entries, replies


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("task", ["AMIC", "VMIC"])
def test_multi_instance_counting_agrees_with_the_official_evaluator(task, seed):
    entries, replies = mic_set(random.Random(f"{task}-{seed}"), task)
    assert avibench.score_mic(entries, replies, task) == official.eval_multi_instance_cls_and_count(entries, replies, task)


# -- retrieval, AVL, AVLG ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("task", ["AVR", "VAR"])
def test_retrieval_agrees_with_the_official_evaluator(task, seed):
    rng = random.Random(f"{task}-{seed}")
    entries, replies = [], []
    for i in range(60):
        gold = rng.sample(range(10), rng.randint(0, 3))
        entries.append(entry(task, f"{i:05d}", gold, prompt=f"prompt_{task.lower()}"))
        predicted = rng.sample(range(20) if rng.random() < 0.3 else range(10), rng.randint(0, 8))
        if rng.random() < 0.15:
            predicted = [8, 1, 16, 3]  # CPython's set order is [8, 1, 3, 16] here, not ascending: it decides R@1
        body = ", ".join(map(str, predicted))
        replies.append(rng.choice([f"[{body}]", body, body.replace(" ", ""), f"The indices are {body}.", "[]", "none",
                                   f"[{body}]\n[{body}]", None, "", "[0, 1, 3]"]))
    assert score_retrieval(entries, replies) == official.eval_retrieval(entries, replies)


def avl_set(rng, n=60):
    categories = ["dog", "person", "guitar", "car"]
    entries, replies = [], []
    for i in range(n):
        width, height = rng.choice([(640, 360), (1280, 720), (320, 240)])
        boxes = {}
        for category in rng.sample(categories, rng.randint(1, 3)):
            for k in range(1, rng.randint(1, 3) + 1):
                x, y = rng.randint(0, width - 50), rng.randint(0, height - 50)
                boxes[f"{category}_{k}"] = [x, y, rng.randint(10, width - x), rng.randint(10, height - y)]
        gold = {"bbox": boxes, "original_wh": [width, height]} if rng.random() < 0.95 else {"bbox": boxes}
        entries.append(entry("AVL", f"{i:05d}", gold, "avl_cls_list", prompt="prompt_avl"))
        predicted = {}
        for key, (x, y, w, h) in boxes.items():
            if rng.random() < 0.7:
                jitter = [x + rng.randint(-20, 20), y + rng.randint(-20, 20), x + w + rng.randint(-20, 20), y + h + rng.randint(-20, 20)]
                scale = rng.choice(["unit", "thousand", "pixel"])
                box = ([round(jitter[0] / width, 3), round(jitter[1] / height, 3), round(jitter[2] / width, 3), round(jitter[3] / height, 3)]
                       if scale == "unit" else [v * 1000 // max(width, height) for v in jitter] if scale == "thousand" else jitter)
                name = rng.choice([key, key.split("_")[0], f"{key.split('_')[0]}_{rng.randint(1, 4)}", key.upper()])
                predicted[name] = rng.choice([box, str(box), f"'{box}'", box[:3], "[x, y, 1, 2]", box])
        if rng.random() < 0.2 and predicted:  # a tie: the same box under a second name of that category
            name, box = next(iter(predicted.items()))
            predicted[f"{name.split('_')[0]}_9"] = box
        text = repr(predicted)
        replies.append(rng.choice([text, text, json.dumps(predicted), "[[0.1, 0.2, 0.3, 0.4]]", "{}", "garbage", None,
                                   "", f"{text}<|endoftext|>"]))
    return entries, replies


@pytest.mark.parametrize("seed", SEEDS)
def test_avl_agrees_with_the_official_evaluator(seed):
    entries, replies = avl_set(random.Random(f"avl-{seed}"))
    wrong_categories = [None if r is None else r.replace("dog", "cat").replace("person", "cat").replace("guitar", "cat")
                        .replace("car", "cat") for r in replies]
    for candidate in (replies, ["garbage"] * len(replies), wrong_categories):  # the last two: semantic F1 0
        expected = official.eval_avl(entries, candidate)
        assert score_avl(entries, candidate) == (expected["final_score"], expected["miou"], expected["instance_score"])


def test_avl_with_no_instance_on_either_side_is_refused_as_officially():
    entries = [entry("AVL", "00000", {"bbox": {}, "original_wh": [10, 10]})]
    with pytest.raises(ValueError):
        official.eval_avl(entries, ["{}"])
    with pytest.raises(ValueError, match="no gold and no predicted instance"):
        score_avl(entries, ["{}"])


@pytest.mark.parametrize("seed", SEEDS)
def test_avlg_agrees_with_the_official_evaluator(seed):
    rng = random.Random(f"avlg-{seed}")
    entries, replies = [], []
    for i in range(60):
        width, height = rng.choice([(640, 360), (1280, 720)])
        frames = {}
        for f in range(rng.choice([10, 10, 3])):
            x, y = rng.randint(0, width - 60), rng.randint(0, height - 60)
            frames[f"frame_{f}"] = None if rng.random() < 0.15 else [x, y, rng.randint(5, 60), rng.randint(5, 60)]
        entries.append(entry("AVLG", f"{i:05d}", {"bbox": frames, "original_wh": [width, height]}, prompt="prompt_avlg"))
        predicted = {}
        for name, box in frames.items():
            roll = rng.random()
            if box is not None and roll < 0.6:
                predicted[name] = [round((box[0] + rng.randint(-15, 15)) / width, 3), round((box[1] + rng.randint(-15, 15)) / height, 3),
                                   round((box[0] + box[2]) / width, 3), round((box[1] + box[3]) / height, 3)]
            elif roll < 0.75:
                predicted[name] = rng.choice([[], None, [0.1, 0.2, 0.3], "0.1, 0.2", [0.3, 0.3, 0.1, 0.1], [True, 0, 1, 1]])
        text = repr(predicted)
        replies.append(rng.choice([text, text, f"```json\n{text}\n```", json.dumps(predicted), "[1, 2]", "{}", "nonsense", None, ""]))
    assert score_avlg(entries, replies) == official.eval_avlg(entries, replies)
