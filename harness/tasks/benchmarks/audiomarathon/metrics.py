"""AudioMarathon's metrics (its protocol's scripts), wired from its rules into the metric registry:
``audiomarathon_*`` (option ``audiomarathon_task``: SED, MC, SCR, SER, ASC, ER, SD, SAR, SGR, ASR for
the Qwen2.5-Omni scripts' rules, ``<task>:<family>`` for another model's script where it scores
otherwise), unparsed answers dropped before F1 as their scripts drop them; percentages. It also
registers the duration buckets of its analysis scripts (``durations``) for its tasks.
"""

from __future__ import annotations

from collections.abc import Callable

from ....scoring.durations import BENCHMARK_BUCKETS
from ...metrics import Metric, parsed_of, register_metric
from . import model_scripts, scores
from .durations import BENCHMARK, DURATIONS

BENCHMARK_BUCKETS.register(BENCHMARK, DURATIONS)

AUDIOMARATHON_RULES = {**scores.TASKS, **model_scripts.RULES}  # how each script scores
AUDIOMARATHON_TASKS = (*AUDIOMARATHON_RULES, "ASR")


def _am_gold(task: str, answer: str) -> str:
    return AUDIOMARATHON_RULES[task].gold(str(answer))


def _am_per_sample(parsed: str | None, sample, audiomarathon_task: str) -> dict[str, float]:
    if audiomarathon_task == "ASR":
        return {"am_wer": scores.wer(sample.answer, parsed or "")}
    return {"correct": float(_am_gold(audiomarathon_task, sample.answer) == (parsed or ""))}


def _am_classification(key: str) -> Callable[..., float]:
    def compute(rows: list[dict], audiomarathon_task: str) -> float:
        if audiomarathon_task == "ASR":
            raise ValueError(f"audiomarathon_{key} is a classification metric; ASR's are audiomarathon_word_accuracy, _wer")
        golds = [_am_gold(audiomarathon_task, r["reference"]) for r in rows]
        rule = AUDIOMARATHON_RULES[audiomarathon_task]
        computed = scores.classification_metrics(rule, golds, [parsed_of(r) or "" for r in rows])
        if key not in computed:
            raise ValueError(f"audiomarathon_{key} exists only where a script computes it ({audiomarathon_task}'s does not)")
        return 100.0 * computed[key]

    return compute


def _am_asr(key: str) -> Callable[..., float]:
    def compute(rows: list[dict], audiomarathon_task: str) -> float:
        return scores.asr_metrics([r["reference"] for r in rows], [parsed_of(r) or "" for r in rows])[key]

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
