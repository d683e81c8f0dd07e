"""MMAR-Rubrics: MMAR's instance-level rubric score of a model's reasoning, reproduced from
ddlBoJack/MMAR ``code/evaluation_rubrics.py`` (commit 3bce090, Feb. 2026).

Protocol: a wrong final answer (MMAU/MMAR ``string_match`` of ``answer_prediction`` against the gold
text) scores 0 without asking the judge. A right one is rated by the judge 5 times (system prompt
``SYSTEM_PROMPT``, the user prompt of ``user_prompt``, temperature 0, seed 42; officially
gpt-4o-2024-11-20): each rating is the sum of the rubric points the judge awards over the sum of
their maxima (``read_rating``), and the item's score is the mean of the 3 middle ratings. Items are
``MMAR-meta.jsonl`` lines with ``thinking``, ``cue`` and ``rubric`` (a list of ``{"name",
"scoring_point", "note", "choices"}``), plus the model's ``thinking_prediction`` and
``answer_prediction``. Reports give score and accuracy (answer right) in percent, in total and by
modality, category and sub-category.

The five ratings are five draws of the same request (the official script relies on the API's
nondeterminism at temperature 0); each is cached under its own draw label, so a rerun asks nothing
and a deterministic local judge gives five equal ratings. A rating that does not parse is asked
again (a new draw), up to ``PARSE_ATTEMPTS`` times, as the official loop re-asks; transient API
failures are the judge's own retries. A judge that keeps failing raises ``JudgeError`` (officially
the item is left "NOT EVALUATED").
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ....judge import Judge, JudgeError, JudgeSettings
from ..mmau.rules import last_answer_tag, string_match

SYSTEM_PROMPT = ("You are a impartial and meticulous AI evaluator. Your task is to assess a model's response to a "
                 "question by evaluating its reasoning and its final answer. You must strictly follow the provided "
                 "ground truth information and the detailed scoring rubric.")
OFFICIAL_MODEL = "gpt-4o-2024-11-20"
RATERS = 5
SETTINGS = JudgeSettings(temperature=0.0, seed=42)
PARSE_ATTEMPTS = 20  # ``DEFAULT_API_MAX_RETRIES``

log = logging.getLogger(__name__)


class RubricResponseError(ValueError):
    """A judge's rating that does not follow the required JSON (the message says how)."""


def clean_block(text: str) -> str:
    """``clean``: the text stripped, and every line's leading whitespace removed."""
    return "\n".join(line.lstrip() for line in text.strip().splitlines())


def user_prompt(question: str, answer: str, thinking: str, rubric: Sequence[Mapping],
                thinking_prediction: str, answer_prediction: str) -> str:
    """``create_evaluation_user_prompt``: context, one section per rubric criterion, the JSON the
    judge must return, then the model's reasoning and answer. The whole prompt goes through
    ``clean_block``, the model's reasoning included."""
    criteria = "\n".join(clean_block(
        f"### Criterion: {item['name']}\n- Scoring Rule: {item['scoring_point']}\n- Score Options: {item['choices']}\n"
        "- Evaluate: Carefully read the model's reasoning and determine if it meets this criterion.\n"
    ) for item in rubric)
    formats = "\n".join(clean_block(
        f'{{\n"name": "{item["name"]}",\n"score": [Assign a score from {item["choices"]}],\n'
        '"justification": "Your justification for this score, citing evidence from the model\'s reasoning. '
        '(less than 50 words)"\n}' + ("," if i < len(rubric) - 1 else "")
    ) for i, item in enumerate(rubric))
    return clean_block(
        "## Ground Truth & Problem Context\n\n"
        f"- Question: {question}\n- Correct Answer: {answer}\n- Ideal Reasoning (for reference): {thinking}\n\n"
        "## Evaluation Rubric & Scoring\n\n"
        "For each point in the rubric, provide a score and a brief justification based on the model's output.\n\n"
        f"{criteria}\n\n"
        "## Required Output Format\n\n"
        "Provide your complete evaluation in a single, valid JSON object. Do not add any text before or after the "
        "JSON. The JSON structure must be as follows:\n\n"
        f"[\n{formats}\n]\n\n"
        "## Model's Submission to Evaluate\n\n"
        f"- Model's Reasoning:\n{thinking_prediction} The answer is {answer_prediction}.\n"
    )


def read_rating(reply: str, rubric: Sequence[Mapping]) -> float:
    """``validate_and_score``: the first ``[{...}]`` span of the reply (else the whole reply) as a
    JSON list with one ``{"name", "score"}`` per criterion, in rubric order; each score numeric and
    one of the criterion's ``choices``. The rating is the sum of scores over the sum of the choices'
    maxima (0 if that is 0). A name that differs from the rubric's is only logged, as officially."""
    match = re.search(r"\[\s*\{.*\}\s*\]", reply, re.DOTALL)
    try:
        rated = json.loads(match.group(0) if match else reply)
    except json.JSONDecodeError as error:
        raise RubricResponseError(f"invalid JSON in the judge's rating: {error}") from error
    if not isinstance(rated, list):
        raise RubricResponseError("the judge's rating must be a JSON list")
    if len(rated) != len(rubric):
        raise RubricResponseError(f"rubric length mismatch: expected {len(rubric)} items, got {len(rated)}")
    total, maximum = 0, 0
    for i, (item, criterion) in enumerate(zip(rated, rubric)):
        if not all(key in item for key in ("name", "score")):
            raise RubricResponseError(f"rated item {i} must include 'name' and 'score'")
        if item["name"] != criterion["name"]:
            log.warning("rubric name mismatch at %d: expected %r, got %r", i, criterion["name"], item["name"])
        score = item["score"]
        if not isinstance(score, (int, float)):
            raise RubricResponseError(f"score for {criterion['name']!r} must be numeric, got {type(score).__name__}")
        if score not in criterion["choices"]:
            raise RubricResponseError(f"invalid score for {criterion['name']!r}: {score}; allowed: {criterion['choices']}")
        total += score
        maximum += max(criterion["choices"])
    return 0.0 if maximum == 0 else total / maximum


def middle_mean(ratings: Sequence[float]) -> float:
    """The mean of the ratings without the lowest and the highest (all of them when fewer than 3)."""
    ordered = sorted(ratings)
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    return sum(kept) / len(kept)


@dataclass(frozen=True)
class RubricResult:
    score: float  # 0-1
    correct: bool  # the final answer passed string_match
    ratings: tuple[float, ...] = ()


def rubric_score(judge: Judge, item: Mapping, thinking_prediction: str, answer_prediction: str) -> RubricResult:
    """``evaluate_one_record`` for one MMAR item."""
    if not string_match(item["answer"], answer_prediction, item["choices"]):
        return RubricResult(0.0, False)
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": user_prompt(item["question"], item["answer"], item["thinking"], item["rubric"],
                                                        thinking_prediction, answer_prediction)}]
    ratings = tuple(_rating(judge, messages, item, rater) for rater in range(RATERS))
    return RubricResult(middle_mean(ratings), True, ratings)


def _rating(judge: Judge, messages: list[dict[str, str]], item: Mapping, rater: int) -> float:
    problem = None
    for attempt in range(PARSE_ATTEMPTS):
        reply = judge.complete(messages, SETTINGS, draw=f"rater{rater}" if attempt == 0 else f"rater{rater}-retry{attempt}")
        try:
            return read_rating(reply, item["rubric"])
        except RubricResponseError as error:
            problem = error
    raise JudgeError(f"item {item.get('id')}: rater {rater} gave no valid rating in {PARSE_ATTEMPTS} tries; last: {problem}")


def split_reply(reply: str) -> tuple[str, str]:
    """A model's reply as MMAR-Rubrics takes it apart: the reasoning (the reply without its last
    ``<answer>...</answer>``) and the final answer (``mmau.answer_span``; the whole reply without
    tags). Ours: the official script receives the two already apart."""
    tag = last_answer_tag(reply)
    if tag is None:
        return reply.strip(), reply.strip()
    return (reply[: tag.start()] + reply[tag.end() :]).strip(), tag.group(1).strip()


def rubric_report(rows: Sequence[Mapping]) -> dict:
    """The script's closing report from rows ``{"modality", "category", "sub-category", "score",
    "correct"}``: ``{"Total": {...}, "By modality": {...}, "By category": {...}, "By sub-category":
    {...}}``, each cell ``{"score", "accuracy", "samples"}`` in percent (score = mean score x 100,
    accuracy = share right x 100); groups in first-seen order, a missing sub-category under ``None``."""
    def cell(group: Sequence[Mapping]) -> dict:
        n = len(group)
        return {"score": sum(r["score"] for r in group) / n * 100 if n else 0.0,
                "accuracy": sum(bool(r["correct"]) for r in group) / n * 100 if n else 0.0, "samples": n}

    report = {"Total": cell(rows)}
    for title, key in (("By modality", "modality"), ("By category", "category"), ("By sub-category", "sub-category")):
        groups: dict = {}
        for row in rows:
            groups.setdefault(row[key] if key != "sub-category" else row.get(key), []).append(row)
        report[title] = {name: cell(group) for name, group in groups.items()}
    return report
