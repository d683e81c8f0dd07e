"""The judged metrics' prompts and readers: AVI-Bench's refine step (auto_format/run.py) and
MMAR-Rubrics (code/evaluation_rubrics.py), each against a transcription of the official function or
worked out by hand, and run through a recording judge."""

from __future__ import annotations

import json
import random
import re

import pytest

from kvprune.harness.tasks.benchmarks.avibench import refine
from kvprune.harness.tasks.benchmarks.mmar import rubrics
from kvprune.harness.tasks.benchmarks.avibench.rules import text_input
from kvprune.harness.judge import JudgeError, JudgeSettings, JudgeStats


class RecordingJudge:
    """A Judge that answers from a function of (messages, draw) and records what it was asked."""

    identity = "test:recording"

    def __init__(self, answer):
        self.answer = answer
        self.asked: list[tuple[list, JudgeSettings, object]] = []
        self.stats = JudgeStats()

    def complete(self, messages, settings=JudgeSettings(), draw=0):
        self.asked.append((messages, settings, draw))
        return self.answer(messages, draw)


def entry(task, answer="yes", options=None, prompt=None, text="Is it loud?", subtask=None):
    question = {"prompt": prompt, "text": text, "options": options}
    return {"id": "00001", "task": task, "subtask": subtask, "input": {"question": question}, "output": {"question_answer": answer}}


# -- AVI-Bench refine ---------------------------------------------------------------------------------

def test_qa_refine_fills_question_reply_and_the_tasks_instruction():
    e = entry("ASQA", options="options_yes_no")
    prompt = refine.refine_prompt(e, "Hmm. I would say YES, it is.")
    assert f"[>original_question] {text_input(e)} [original_question<]" in prompt
    assert "[>original_responses] Hmm. I would say YES, it is. [original_responses<]" in prompt
    assert f"[>what_you_should_do] {refine.QA_INSTRUCTIONS['ASQA']} [what_you_should_do<]" in prompt
    assert prompt.endswith("you can extract the correct answer=\n") and "x_original" not in prompt
    beats = refine.refine_prompt(entry("ASQA", "3", subtask="beats_counting"), None)
    assert refine.QA_INSTRUCTIONS["ASQA:beats_counting"] in beats and "[>original_responses] i dont know [" in beats
    assert refine.QA_INSTRUCTIONS["AVQA"] in refine.refine_prompt(entry("AVQA", subtask="beats_counting"), "x")
    # replacement order: a question that happens to contain a later placeholder is filled in by it
    tricky = refine.refine_prompt(entry("AVSQA", text="Say x_original_responses"), "cube")
    assert "Say cube [original_question<]" in tricky


@pytest.mark.parametrize(("task", "family", "missing"), [("AVR", "retrieval", "[]"), ("VAR", "retrieval", "[]"),
                                                        ("AVLG", "avlg", "[]"), ("AVL", "avl", "{}"),
                                                        ("AMIC", "mic", "{}"), ("VMIC", "mic", "{}")])
def test_json_families_put_the_reply_in_their_prompt(task, family, missing):
    template = refine.JSON_FAMILIES[family][0]
    assert refine.refine_prompt(entry(task), "two dogs") == template.replace("MODEL_MSG", "two dogs")
    assert refine.refine_prompt(entry(task), None) == template.replace("MODEL_MSG", missing)
    assert template.count("MODEL_MSG") == 1 and template.endswith("Your refined output is: ```json\n")


def test_tasks_without_refine_pass_through_and_unknown_tasks_are_refused():
    judge = RecordingJudge(lambda m, d: "never")
    for task in refine.NOT_REFINED:
        assert refine.refine_reply(judge, entry(task), "Yes, they match.") == "Yes, they match."
    assert judge.asked == []
    with pytest.raises(ValueError, match="no refine rule"):
        refine.refine_prompt(entry("XYZ"), "a")


@pytest.mark.parametrize(("raw", "cleaned"), [
    ('```json\n{\n    "dog": "2",\n    "cat": null\n}\n```', "{'dog': '2','cat': []}"),
    ('  answer= {"dog": "1"}', "{'dog': '1'}"),
    ("Answer=[0, 3]", "[0, 3]"),
    ("nullable answer=1", "[]able answer=1"),
    (None, ""),
])
def test_clean_json_output(raw, cleaned):
    assert refine.clean_json_output(raw) == cleaned


def test_refine_reply_asks_once_and_cleans_json_but_not_qa():
    judge = RecordingJudge(lambda m, d: '```json\n{"dog": "2"}\n```' if "dictionary" in m[0]["content"] else "**Yes**")
    assert refine.refine_reply(judge, entry("AMIC"), "two dogs bark") == "{'dog': '2'}"
    assert refine.refine_reply(judge, entry("ASQA", options="options_yes_no"), "yes it is") == "**Yes**"
    assert [(len(m), m[0]["role"], s) for m, s, _ in judge.asked] == [(1, "user", JudgeSettings())] * 2

    def broken(messages, draw):
        raise JudgeError("judge test:broken failed after 5 attempts")
    with pytest.raises(JudgeError, match="failed after 5 attempts"):
        refine.refine_reply(RecordingJudge(broken), entry("AVL"), "{}")


# -- MMAR-Rubrics -------------------------------------------------------------------------------------

def official_clean(string):
    return "\n".join(line.lstrip() for line in string.strip().splitlines())


def official_user_prompt(question, answer, thinking, cue, thinking_prediction, answer_prediction, rubric):
    """``create_evaluation_user_prompt`` (ddlBoJack/MMAR code/evaluation_rubrics.py), transcribed."""
    formatted_cues = ", ".join(cue)  # noqa: F841 (unused officially too)
    rubric_sections = []
    for item in rubric:
        section = f"""
        ### Criterion: {item['name']}
        - Scoring Rule: {item['scoring_point']}
        - Score Options: {item['choices']}
        - Evaluate: Carefully read the model's reasoning and determine if it meets this criterion.
        """
        rubric_sections.append(official_clean(section))
    rubric_string = "\n".join(rubric_sections)
    json_format_sections = []
    for i, item in enumerate(rubric):
        comma = "," if i < len(rubric) - 1 else ""
        section = f"""
        {{
        "name": "{item['name']}",
        "score": [Assign a score from {item['choices']}],
        "justification": "Your justification for this score, citing evidence from the model's reasoning. (less than 50 words)"
        }}{comma}"""
        json_format_sections.append(official_clean(section))
    json_format_string = "\n".join(json_format_sections)
    prompt = f"""
    ## Ground Truth & Problem Context

    - Question: {question}
    - Correct Answer: {answer}
    - Ideal Reasoning (for reference): {thinking}

    ## Evaluation Rubric & Scoring

    For each point in the rubric, provide a score and a brief justification based on the model's output.

    {rubric_string}

    ## Required Output Format

    Provide your complete evaluation in a single, valid JSON object. Do not add any text before or after the JSON. The JSON structure must be as follows:

    [
    {json_format_string}
    ]

    ## Model's Submission to Evaluate

    - Model's Reasoning:
    {thinking_prediction} The answer is {answer_prediction}.
    """
    return official_clean(prompt)


def official_validate_and_score(raw_response, rubric):
    """``validate_and_score``, transcribed (its exceptions become ValueError)."""
    match = re.search(r'\[\s*\{.*\}\s*\]', raw_response, re.DOTALL)
    content = match.group(0) if match else raw_response
    eval_result = json.loads(content)
    if not isinstance(eval_result, list) or len(eval_result) != len(rubric):
        raise ValueError("shape")
    total_prediction_score = total_max_score = 0
    for res_item, rub_item in zip(eval_result, rubric):
        if not all(key in res_item for key in ["name", "score"]):
            raise ValueError("keys")
        score = res_item["score"]
        if not isinstance(score, (int, float)) or score not in rub_item["choices"]:
            raise ValueError("score")
        total_prediction_score += score
        total_max_score += max(rub_item["choices"])
    if total_max_score == 0:
        return 0.0
    return total_prediction_score / total_max_score


def random_rubric(rng):
    return [{"name": rng.choice(["Cue: Throat Singing", "Reasoning {x}", "Cultural \"context\""]) + f" {i}",
             "scoring_point": rng.choice(["Award 1 point if ...", "  Award 2 points\nif indented", ""]),
             "note": "n", "choices": rng.choice([[0, 1], [0, 1, 2], [0, 0.5, 1], [0]])} for i in range(rng.randint(1, 5))]


@pytest.mark.parametrize("seed", range(40))
def test_the_user_prompt_is_the_official_one(seed):
    rng = random.Random(seed)
    rubric = random_rubric(rng)
    texts = ["", "plain", "  leading spaces\n   and lines\n\n", "braces {x} and [y]", "tabs\tand \\n"]
    args = [rng.choice(texts) for _ in range(5)]
    question, answer, thinking, thinking_prediction, answer_prediction = args
    assert rubrics.user_prompt(question, answer, thinking, rubric, thinking_prediction, answer_prediction) == \
        official_user_prompt(question, answer, thinking, ["c"], thinking_prediction, answer_prediction, rubric)


@pytest.mark.parametrize("seed", range(60))
def test_ratings_are_read_as_officially(seed):
    rng = random.Random(f"rating-{seed}")
    rubric = random_rubric(rng)
    items = [{"name": c["name"] if rng.random() < 0.9 else "renamed", "score": rng.choice(c["choices"] + [True, "1", 3]),
              "justification": "ok"} for c in rubric]
    if rng.random() < 0.2:
        items = items[:-1] or items + items
    if rng.random() < 0.1:
        items[0].pop("score")
    body = json.dumps(items, indent=rng.choice([None, 2]))
    reply = rng.choice([body, f"Here it is:\n```json\n{body}\n```\nDone.", body[:-1], "{}", f"[{body}]", "no json"])
    try:
        expected = official_validate_and_score(reply, rubric)
    except (ValueError, KeyError, TypeError):
        with pytest.raises(rubrics.RubricResponseError):
            rubrics.read_rating(reply, rubric)
    else:
        assert rubrics.read_rating(reply, rubric) == expected


def test_the_item_score_is_the_mean_of_the_three_middle_ratings():
    assert rubrics.middle_mean([1.0, 0.2, 0.6, 0.8, 0.4]) == pytest.approx((0.4 + 0.6 + 0.8) / 3)
    assert rubrics.middle_mean([0.5, 1.0]) == 0.75 and rubrics.middle_mean([0.4]) == 0.4


ITEM = {"id": "q1", "question": "Which environment?", "choices": ["Mountain Canyon", "Open Grassland", "City Streets"],
        "answer": "Open Grassland", "thinking": "Throat singing carries far.", "cue": ["Throat Singing"],
        "modality": "music", "category": "Cultural Layer", "sub-category": "Professional Knowledge and Reasoning",
        "rubric": [{"name": "Cue", "scoring_point": "1 if throat singing", "note": "", "choices": [0, 1]},
                   {"name": "Reasoning", "scoring_point": "1 if open space", "note": "", "choices": [0, 1]}]}


def rating(*scores):
    return json.dumps([{"name": n, "score": s, "justification": "j"} for n, s in zip(("Cue", "Reasoning"), scores)])


def test_a_wrong_answer_scores_zero_without_asking_the_judge():
    judge = RecordingJudge(lambda m, d: rating(1, 1))
    assert rubrics.rubric_score(judge, ITEM, "reasoning", "City Streets") == rubrics.RubricResult(0.0, False)
    assert judge.asked == []


def test_a_right_answer_is_rated_five_times_and_unreadable_ratings_are_asked_again():
    per_draw = {"rater0": rating(1, 1), "rater1": "not json", "rater1-retry1": rating(0, 1), "rater2": rating(0, 0),
                "rater3": rating(1, 0), "rater4": rating(1, 1)}
    judge = RecordingJudge(lambda m, d: per_draw[d])
    result = rubrics.rubric_score(judge, ITEM, "  Throat singing\n  in open land.", "Open Grassland")
    assert result.correct and result.ratings == (1.0, 0.5, 0.0, 0.5, 1.0)
    assert result.score == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    messages, settings, _ = judge.asked[0]
    assert messages[0] == {"role": "system", "content": rubrics.SYSTEM_PROMPT} and settings == JudgeSettings(0.0, None, 42)
    # the reasoning's leading spaces go, as the whole prompt is cleaned line by line
    assert messages[1]["content"].endswith("- Model's Reasoning:\nThroat singing\nin open land. The answer is Open Grassland.")
    assert [d for _, _, d in judge.asked] == ["rater0", "rater1", "rater1-retry1", "rater2", "rater3", "rater4"]


def test_a_judge_that_never_rates_validly_is_an_error():
    judge = RecordingJudge(lambda m, d: "I refuse")
    with pytest.raises(JudgeError, match="item q1: rater 0 gave no valid rating in 20 tries"):
        rubrics.rubric_score(judge, ITEM, "r", "Open Grassland")
    assert len(judge.asked) == rubrics.PARSE_ATTEMPTS


def test_the_report_groups_as_the_script_prints():
    rows = [{"modality": "music", "category": "A", "sub-category": "x", "score": 0.8, "correct": True},
            {"modality": "sound", "category": "A", "score": 0.0, "correct": False},
            {"modality": "music", "category": "B", "sub-category": "x", "score": 0.5, "correct": True}]
    report = rubrics.rubric_report(rows)
    assert report["Total"] == {"score": pytest.approx(130 / 3), "accuracy": pytest.approx(200 / 3), "samples": 3}
    assert list(report["By modality"]) == ["music", "sound"] and report["By modality"]["music"]["score"] == pytest.approx(65.0)
    assert report["By sub-category"][None] == {"score": 0.0, "accuracy": 0.0, "samples": 1}
    assert report["By category"]["B"] == {"score": 50.0, "accuracy": 100.0, "samples": 1}


@pytest.mark.parametrize("reply, split", [
    ("think <answer>x</answer> tail", ("think  tail", "x")),
    ("think <ANSWER>x</ANSWER> tail", ("think  tail", "x")),  # the tag in any case, as the answer is found
    ("r <answer>a</answer> more <answer>b", ("r  more <answer>b", "a")),  # an unclosed tag is reasoning
    ("plain reply", ("plain reply", "plain reply")),
])
def test_a_reply_splits_at_its_last_answer_tag_into_reasoning_and_answer(reply, split):
    assert rubrics.split_reply(reply) == split
