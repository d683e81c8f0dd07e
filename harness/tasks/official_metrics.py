"""The benchmarks' own metrics, wired from ``harness.official`` (the official rules as pure functions)
into the metric registry. Each says which official number it is; all are percentages (the official
0-1 scores times 100), NaN when no row applies (a kind of question the rows lack, no reply at all).

- STAR-Bench: ``starbench_aa``, ``starbench_acr`` (option ``starbench_part``: perception parts
  ``pc*`` average over sub-categories of 2-decimal scores, reasoning parts pool their runs).
- MMAU, MMAR: ``string_match`` (the whole reply against the gold option's text); MMAR-Rubrics:
  ``mmar_rubrics`` (judged: the rubric score, 0 for a wrong answer) and ``mmar_rubrics_accuracy``.
- AVI-Bench: in ``avibench_metrics``.
- AudioMarathon protocol: ``audiomarathon_*`` (option ``audiomarathon_task``: SED, MC, SCR, SER, ASC,
  ER, SD, SAR, SGR, ASR for the Qwen2.5-Omni scripts' rules, ``<task>:<family>`` for another model's
  script where it scores otherwise), unparsed answers dropped before F1 as their scripts drop them.
- ST-AudioQA (provisional): ``st_answer_accuracy``, ``st_yes_no_accuracy``, ``st_event_map``,
  ``st_family_average``, by the item's ``kind`` (``answer``, ``verification``, ``detection``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ..official import audiomarathon_models, audiomarathon_scores, mmar_rubrics, mmau, staudioqa, starbench
from .judged import require_judge
from .metrics import Metric, correct, mean_correct, parsed_of, register_metric
from .metrics import row_meta as meta

NAN = float("nan")


# -- STAR-Bench ---------------------------------------------------------------------------------------


def _starbench(key: str) -> Callable[..., float]:
    def compute(rows: list[dict], starbench_part: str) -> float:
        results = [
            starbench.RunResult(r["item"], meta(r).get("category"), meta(r).get("sub-category"), bool(r["correct"]))
            for r in rows
        ]
        return starbench.part_scores(starbench_part, results)["Total"][key]

    return compute


def _starbench_run(parsed: str | None, sample, starbench_part: str) -> dict[str, float]:
    """A run is right when the parsed letter is the run's gold letter (the part does not matter here)."""
    return correct(parsed, sample)


STARBENCH_PARTS = tuple(starbench.PARTS)
register_metric(Metric("starbench_aa", _starbench("AA"), _starbench_run, options={"starbench_part": STARBENCH_PARTS}))
register_metric(Metric("starbench_acr", _starbench("ACR"), _starbench_run, options={"starbench_part": STARBENCH_PARTS}))


# -- MMAU, MMAR -------------------------------------------------------------------------------------


def _string_match(parsed: str | None, sample) -> dict[str, float]:
    return {"correct": float(mmau.string_match(sample.answer, parsed or "", sample.choices))}


register_metric(Metric("string_match", mean_correct, _string_match))


def _rubric_per_sample(parsed: str | None, sample, judge) -> dict[str, float]:
    """MMAR-Rubrics on one reply: its reasoning rated against the item's rubric by the judge (5
    ratings, the mean of the middle 3), 0 when the final answer is wrong."""
    judge = require_judge(judge, "MMAR-Rubrics (mmar_rubrics)")
    missing = [name for name in ("thinking", "rubric") if name not in sample.meta]
    if missing:
        raise ValueError(f"MMAR item {sample.id} has no {missing}: MMAR-Rubrics reads the thinking and rubric fields of "
                         "MMAR-meta.jsonl (keep them with layout_options.meta_fields)")
    item = dict(id=sample.id, question=sample.question, answer=sample.answer, choices=sample.choices,
                thinking=sample.meta["thinking"], rubric=sample.meta["rubric"])
    thinking, answer = mmar_rubrics.split_reply(parsed or "")
    result = mmar_rubrics.rubric_score(judge, item, thinking, answer)
    return {"rubric": 100.0 * result.score}


def _answer_span_match(parsed: str | None, sample) -> dict[str, float]:
    """MMAR-Rubrics' accuracy: ``string_match`` on the final answer alone (what decides a 0 rubric score)."""
    return {"correct": float(mmau.string_match(sample.answer, mmar_rubrics.split_reply(parsed or "")[1], sample.choices))}


def _rubric_mean(rows: list[dict]) -> float:
    """The mean rubric score over the rows; a row without one (its judgement failed: an error row)
    counts 0, as every failed sample counts as wrong."""
    values = [r.get("rubric") for r in rows]
    return sum(float(v) for v in values if isinstance(v, (int, float)) and not math.isnan(v)) / len(rows)


register_metric(Metric("mmar_rubrics", _rubric_mean, _rubric_per_sample, judged=True))
register_metric(Metric("mmar_rubrics_accuracy", mean_correct, _answer_span_match))


# -- AudioMarathon protocol ---------------------------------------------------------------------------

AUDIOMARATHON_RULES = {**audiomarathon_scores.TASKS, **audiomarathon_models.RULES}  # how each script scores
AUDIOMARATHON_TASKS = (*AUDIOMARATHON_RULES, "ASR")


def _am_gold(task: str, answer: str) -> str:
    return AUDIOMARATHON_RULES[task].gold(str(answer))


def _am_per_sample(parsed: str | None, sample, audiomarathon_task: str) -> dict[str, float]:
    if audiomarathon_task == "ASR":
        return {"am_wer": audiomarathon_scores.wer(sample.answer, parsed or "")}
    return {"correct": float(_am_gold(audiomarathon_task, sample.answer) == (parsed or ""))}


def _am_classification(key: str) -> Callable[..., float]:
    def compute(rows: list[dict], audiomarathon_task: str) -> float:
        if audiomarathon_task == "ASR":
            raise ValueError(f"audiomarathon_{key} is a classification metric; ASR's are audiomarathon_word_accuracy, _wer")
        golds = [_am_gold(audiomarathon_task, r["reference"]) for r in rows]
        rule = AUDIOMARATHON_RULES[audiomarathon_task]
        scores = audiomarathon_scores.classification_metrics(rule, golds, [parsed_of(r) or "" for r in rows])
        if key not in scores:
            raise ValueError(f"audiomarathon_{key} exists only where a script computes it ({audiomarathon_task}'s does not)")
        return 100.0 * scores[key]

    return compute


def _am_asr(key: str) -> Callable[..., float]:
    def compute(rows: list[dict], audiomarathon_task: str) -> float:
        return audiomarathon_scores.asr_metrics([r["reference"] for r in rows], [parsed_of(r) or "" for r in rows])[key]

    return compute


_AM_OPTIONS = {"audiomarathon_task": AUDIOMARATHON_TASKS}
# a failed run has no label or transcript: the scripts' accuracy, F1s and mean WER drop it; their binary F1, correct
# rate and running WER count every sample
for _key in ("accuracy", "f1_macro", "f1_weighted", "f1_fake", "f1_positive", "correct_rate"):
    _dropped = "skipped" if _key in ("accuracy", "f1_macro", "f1_weighted") else "wrong"
    register_metric(Metric(f"audiomarathon_{_key}", _am_classification(_key), _am_per_sample, options=_AM_OPTIONS,
                           no_answer=_dropped))
register_metric(Metric("audiomarathon_word_accuracy", _am_asr("word_accuracy"), _am_per_sample, options=_AM_OPTIONS,
                       no_answer="skipped"))
register_metric(Metric("audiomarathon_wer", _am_asr("wer_mean"), _am_per_sample, higher_is_better=False, options=_AM_OPTIONS,
                       no_answer="skipped"))
register_metric(Metric("audiomarathon_word_accuracy_all", _am_asr("word_accuracy_all"), _am_per_sample, options=_AM_OPTIONS))
register_metric(Metric("audiomarathon_wer_all", _am_asr("wer_all"), _am_per_sample, higher_is_better=False, options=_AM_OPTIONS))


# -- ST-AudioQA (provisional) ------------------------------------------------------------------------

ST_KINDS = ("answer", "verification", "detection")


def _kind(item_meta: dict) -> str:
    kind = item_meta.get("kind")
    if kind not in ST_KINDS:
        raise ValueError(f"ST-AudioQA item kind {kind!r}: the kind field must be one of {ST_KINDS}")
    return kind


def _gold_labels(answer: str) -> set[str]:
    """A detection item's gold label set: its answer split at ``;`` or ``,``, normalised."""
    return {staudioqa.normalize_answer(label) for label in re.split(r"[;,]", answer)} - {""}


def _st_per_sample(parsed: str | None, sample) -> dict[str, float]:
    kind, reply = _kind(sample.meta), parsed or ""
    if kind == "detection":
        return {}
    if kind == "verification":
        return {"correct": float(staudioqa.parse_yes_no(reply) == staudioqa.normalize_answer(sample.answer))}
    return {"correct": float(staudioqa.normalize_answer(reply) == staudioqa.normalize_answer(sample.answer))}


def _of_kind(rows: list[dict], kind: str) -> list[dict]:
    return [r for r in rows if _kind(meta(r)) == kind]


def _st_accuracy(kind: str) -> Callable[[list[dict]], float]:
    score = staudioqa.yes_no_accuracy if kind == "verification" else staudioqa.answer_accuracy

    def compute(rows: list[dict]) -> float:
        chosen = _of_kind(rows, kind)
        return score([str(r["reference"]) for r in chosen], [parsed_of(r) or "" for r in chosen]) if chosen else NAN

    return compute


def _st_map(rows: list[dict]) -> float:
    chosen = _of_kind(rows, "detection")
    if not chosen:
        return NAN
    golds = [_gold_labels(str(r["reference"])) for r in chosen]
    classes = sorted({label for labels in golds for label in labels})
    predicted = [staudioqa.label_set(parsed_of(r) or "", classes) for r in chosen]
    return staudioqa.event_map(golds, predicted, classes)


def _st_family_average(rows: list[dict]) -> float:
    """Type C's "Avg.": the plain mean of its three families' answer accuracies (NaN when one is absent)."""
    accuracies = {}
    for family in staudioqa.FAMILIES["C"]:
        chosen = [r for r in rows if meta(r).get("family") == family]
        if chosen:
            accuracies[family] = mean_correct(chosen)
    return staudioqa.compositional_average(accuracies) if len(accuracies) == 3 else NAN


register_metric(Metric("st_answer_accuracy", _st_accuracy("answer"), _st_per_sample))
register_metric(Metric("st_yes_no_accuracy", _st_accuracy("verification"), _st_per_sample))
register_metric(Metric("st_event_map", _st_map, _st_per_sample))
register_metric(Metric("st_family_average", _st_family_average, _st_per_sample))
