"""AVI-Bench's metrics, wired from its rules (its evaluator's, as pure functions) into the metric
registry, its suite levels (stage scores, Overall, L1) and its refine step (``avibench``). All are percentages (the
evaluator's 0-1 scores times 100), NaN when no row has a reply.

Every scorer reads the row's parsed reply: the model's own reply, or, when the sweep has a judge,
the reply after AVI-Bench's refine step (``Task.grade``). Entries and replies pair in the task's
sample order, as the evaluator pairs them by position.

- ``avibench_full_match`` (ASQA, VSQA_I, VSQA_V, AVM, AVH, VAH, AVQA; ``asqa_accuracy`` is its
  earlier name): the earliest option the reply mentions, numeric answers, double confirm over
  ``pre_`` entries;
- ``avsqa_accuracy``: the chosen options as a set, double confirm;
- ``amic_*``, ``vmic_*`` (``average``, ``semantic``, ``counting``): multi-instance counting;
- ``avl_average``, ``avl_miou``, ``avl_instance``; ``avlg_iou``: boxes;
- ``retrieval_average``, ``retrieval_r1``, ``retrieval_r3``, ``retrieval_f1`` (AVR, VAR);
- ``avc_fense`` (AVC): each caption's FENSE as the sample's score, on local copies of its scoring
  models (``KVPRUNE_FENSE_DIR``); without them the sample is an error naming them, never a zero.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from ...judged import REFINERS
from ...metrics import Metric, parsed_of, register_metric
from ...metrics import row_meta as meta
from ...sample import Sample
from ...suites import SUITE_LEVELS
from . import levels, rules
from .fense import ECHECKER_ENCODER, ECHECKER_WEIGHTS, SBERT_MODEL, FenseModels, FenseUnavailable, caption_fense
from .grounding import score_avl, score_avlg
from .refine import refine_reply
from .retrieval import score_retrieval

NAN = float("nan")
SKIPPED = "skipped"  # the evaluator pairs entries with replies and skips an entry without one: a failed run
#: the folder holding FENSE's local models: paraphrase-TinyBERT-L6-v2/, bert-base-uncased/ and the checkpoint
FENSE_DIR_VARIABLE = "KVPRUNE_FENSE_DIR"


def entries_and_replies(rows: list[dict]) -> tuple[list[dict], list[str | None]]:
    """The rows' official entries and parsed replies, in order; a row without an entry (an item that
    could not be read, written before such rows kept theirs) has no reply either, and is left out as
    the evaluator leaves out an entry without a reply."""
    rows = [r for r in rows if isinstance(meta(r).get("entry"), dict)]
    return [meta(r)["entry"] for r in rows], [parsed_of(r) for r in rows]


def _official(score: Callable, key=None, scale: float = 100.0) -> Callable[[list[dict]], float]:
    """A metric's ``compute`` from an official scorer of (entries, replies); ``key`` picks one of
    several numbers it returns; no entry with a reply is NaN."""

    def compute(rows: list[dict]) -> float:
        try:
            result = score(*entries_and_replies(rows))
        except ValueError:  # no entry has a reply
            return NAN
        return scale * float(result if key is None else result[key])

    return compute


def _full_match_per_sample(parsed: str | None, sample) -> dict[str, float]:
    return {"correct": float(parsed is not None and rules.entry_full_match(sample.meta["entry"], parsed) == 1)}


def _avsqa_per_sample(parsed: str | None, sample) -> dict[str, float]:
    gold = sample.meta["entry"]["output"]["question_answer"]
    return {"correct": float(parsed is not None and rules.avsqa_match(rules.clean(parsed, False), gold) == 1)}


def _nothing(parsed: str | None, sample) -> dict[str, float]:
    return {}


_full_match = _official(lambda entries, replies: rules.score_full_match(entries, replies, double_confirm=True))
register_metric(Metric("avibench_full_match", _full_match, _full_match_per_sample, no_answer=SKIPPED))
register_metric(Metric("asqa_accuracy", _full_match, _full_match_per_sample, no_answer=SKIPPED))
register_metric(Metric("avsqa_accuracy", _official(rules.score_avsqa), _avsqa_per_sample, no_answer=SKIPPED))
for _task in ("AMIC", "VMIC"):
    for _index, _name in enumerate(("average", "semantic", "counting")):
        _mic = (lambda task: lambda entries, replies: rules.score_mic(entries, replies, task))(_task)
        register_metric(Metric(f"{_task.lower()}_{_name}", _official(_mic, _index), _nothing, no_answer=SKIPPED))
for _index, _name in enumerate(("average", "miou", "instance")):
    register_metric(Metric(f"avl_{_name}", _official(score_avl, _index), _nothing, no_answer=SKIPPED))
register_metric(Metric("avlg_iou", _official(score_avlg), _nothing, no_answer=SKIPPED))
for _key, _name in (("Average", "average"), ("Recall@1", "r1"), ("Recall@3", "r3"), ("F1_score", "f1")):
    register_metric(Metric(f"retrieval_{_name}", _official(score_retrieval, _key), _nothing, no_answer=SKIPPED))


# -- AVC: FENSE per caption ----------------------------------------------------------------------------


def fense_models() -> FenseModels:
    """FENSE's scoring models in the folder ``KVPRUNE_FENSE_DIR`` names; FenseUnavailable naming them
    (and the variable) when it is unset."""
    folder = os.environ.get(FENSE_DIR_VARIABLE)
    if not folder:
        raise FenseUnavailable(
            f"AVC's FENSE needs local copies of its scoring models {SBERT_MODEL} and {ECHECKER_ENCODER} and of the "
            f"fluency detector's weights {ECHECKER_WEIGHTS}: put them in one folder (paraphrase-TinyBERT-L6-v2/, "
            f"bert-base-uncased/, {ECHECKER_WEIGHTS}) and set {FENSE_DIR_VARIABLE} to it"
        )
    root = Path(folder)
    return FenseModels(root / SBERT_MODEL.split("/")[-1], root / ECHECKER_ENCODER, root / ECHECKER_WEIGHTS)


def _fense_per_sample(parsed: str | None, sample) -> dict[str, float]:
    """One caption's FENSE against its references (the evaluator skips empty captions: no score)."""
    models = fense_models()
    score = caption_fense(sample.meta["entry"], parsed, models)
    return {} if score is None else {"fense": score}


def _fense(rows: list[dict]) -> float:
    """``eval_caption_with_references``' FENSE: the mean over the scored captions."""
    scores = [r["fense"] for r in rows if isinstance(r.get("fense"), float) and not math.isnan(r["fense"])]
    return 100.0 * round(sum(scores) / len(scores), 5) if scores else NAN


register_metric(Metric("avc_fense", _fense, _fense_per_sample, no_answer=SKIPPED))


# -- the suite's levels --------------------------------------------------------------------------------


@SUITE_LEVELS.register("avibench")
def avibench_suite_levels(rows_by_task: Mapping[str, list[dict]], scores: Mapping[str, float]) -> dict[str, float]:
    """The stage scores of the stages whose tasks all ran, and Overall and L1 when every stage did
    (``levels``), on 0-100: from each task's headline score (``scores``, its primary metric,
    by AVI-Bench task name), VSQA pooled over the VSQA_I and VSQA_V rows (``rows_by_task``)."""
    headline = {task: value / 100.0 for task, value in scores.items() if task not in ("VSQA_I", "VSQA_V")}
    if "VSQA_I" in rows_by_task and "VSQA_V" in rows_by_task:
        try:
            headline["VSQA"] = rules.score_vsqa(*(entries_and_replies(rows_by_task[t]) for t in ("VSQA_I", "VSQA_V")))
        except ValueError:  # no formal entry has a reply
            headline["VSQA"] = NAN
    stages = levels.stage_scores(headline)
    scored = {stage: 100.0 * value for stage, value in stages.items()}
    if len(stages) == len(levels.STAGES):
        scored.update(Overall=100.0 * levels.overall(stages), L1=100.0 * levels.l1_task(stages))
    return scored


@REFINERS.register("avibench")
def avibench_refine(judge, sample: Sample, reply: str) -> str | None:
    """AVI-Bench's refine step on the sample's official entry (tasks it does not refine: the reply)."""
    return refine_reply(judge, sample.meta["entry"], reply)
