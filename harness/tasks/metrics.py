"""Task metrics: plain scoring functions, and the registry that tasks name them from.

A ``Metric`` has two halves. ``per_sample(parsed, sample, **options)`` sees one parsed answer with its
sample (the options, the gold answer, the item's metadata) and returns the numbers stored in that
sample's result row; ``compute(rows, **options)`` reduces the rows of one model x task x method x
ratio, in the task's sample order, to one number. Scores that cross items (per-item ACR, AVI-Bench's
double confirm over ``pre_`` entries, STAR-Bench's macro over sub-categories) are computed there,
at summary time, over the whole ordered set of rows. ``options`` are the task's ``metric_options``
the metric declares it takes.

Every metric returns a number on a 0-100 scale (NaN when no row applies) and says whether higher is
better (WER: lower); the summary, its Pareto fronts and the plots follow that direction. Here an
unparsed answer (``None``) is a wrong prediction: it matches no class, so it adds a false negative to
the gold class and a false positive to none (AudioMarathon's scripts drop such answers before
computing F1: the ``audiomarathon`` protocol's metrics do so). WER is computed on the normalisation
of ``normalize_transcript``. The benchmarks' own metrics are in their folders (``benchmarks/<name>/metrics.py``), which
register them when the ``tasks`` package is imported (this module does not import the modules that register).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import mean
from typing import TYPE_CHECKING, Literal

from kvprune.registry import Registry

from ..scoring.classification import f1
from ..scoring.edit_distance import edit_distance

if TYPE_CHECKING:
    from .sample import Sample

# -- classification ---------------------------------------------------------------------------------


def accuracy(predictions: Sequence[str | None], references: Sequence[str]) -> float:
    """Percentage of predictions equal to their reference."""
    _check_lengths(predictions, references)
    return 100.0 * mean(p == r for p, r in zip(predictions, references))


def f1_score(
    predictions: Sequence[str | None], references: Sequence[str], average: Literal["macro", "weighted"]
) -> float:
    """F1 in percent over the classes seen in the references or predictions (scikit-learn's default
    label set), an unparsed prediction (None) being a miss of its reference's class.

    ``macro`` is the unweighted mean of the per-class F1; ``weighted`` weights each class by its
    number of references. A class with no true positive has F1 0 (scikit-learn's ``zero_division=0``).
    """
    _check_lengths(predictions, references)
    classes = sorted(set(references) | {p for p in predictions if p is not None})
    return 100.0 * f1(references, predictions, average, labels=classes)


# -- speech recognition -----------------------------------------------------------------------------


def normalize_transcript(text: str) -> list[str]:
    """Words compared by WER: lower-cased, apostrophes dropped (``don't`` -> ``dont``), every other
    non-alphanumeric character turned into a space, then split on whitespace.

    AudioMarathon also lower-cases and strips punctuation, but deletes hyphens (``well-known`` ->
    ``wellknown``); splitting them matches LibriSpeech references, which spell such words apart.
    """
    text = re.sub(r"['\u2019]", "", text.lower())
    return re.sub(r"[^\w\s]|_", " ", text).split()


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, reference word count) after normalisation."""
    ref = normalize_transcript(reference)
    return edit_distance(ref, normalize_transcript(hypothesis)), len(ref)


# -- repeated runs of one item ----------------------------------------------------------------------


def all_runs_correct_rate(correct: Sequence[bool], items: Sequence[str]) -> float:
    """ACR: percentage of items answered right in every one of their runs."""
    _check_lengths(correct, items)
    runs: dict[str, list[bool]] = defaultdict(list)
    for c, item in zip(correct, items):
        runs[item].append(bool(c))
    return 100.0 * mean(all(r) for r in runs.values())


def _check_lengths(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"length mismatch: {len(a)} vs {len(b)}")
    if not a:
        raise ValueError("nothing to score")


# -- registry ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """A metric as a task uses it (module docstring): ``per_sample(parsed, sample, **options)`` returns
    the JSON-serialisable numbers stored with each result; ``compute(rows, **options)`` reduces result
    rows (``parsed``, ``reference``, ``item``, ``meta``, ``position`` and those numbers);
    ``higher_is_better`` is False for error rates; ``options`` names the task ``metric_options`` it needs,
    each with its allowed values (None: any); a ``judged`` metric's ``per_sample`` is also given the
    sweep's judge (``judge=``; ``tasks.judged``). ``no_answer`` says what ``compute`` makes of a row
    without an answer (a failed run): ``wrong`` (it counts against the score) or ``skipped`` (left
    out, as a benchmark's own scorer leaves out an entry without a reply); reports say it in words.
    """

    name: str
    compute: Callable[..., float]
    per_sample: Callable[..., dict[str, float]]
    higher_is_better: bool = True
    options: Mapping[str, tuple | None] = field(default_factory=dict)
    judged: bool = False
    no_answer: str = "wrong"

    def __post_init__(self):
        if self.no_answer not in NO_ANSWER:
            raise ValueError(f"metric {self.name}: no_answer must be one of {sorted(NO_ANSWER)}, got {self.no_answer!r}")


#: what a metric makes of a row without an answer, in words (``Metric.no_answer``)
NO_ANSWER = {
    "wrong": "counts as a wrong answer",
    "skipped": "is left out, as the benchmark's own scorer leaves out a question without an answer",
}


def parsed_of(row: dict) -> str | None:
    """A row's parsed answer; anything but a string (None, or NaN after a DataFrame) is unparsed."""
    return row["parsed"] if isinstance(row["parsed"], str) else None


def row_meta(row: dict) -> dict:
    """A row's item metadata (``{}`` for rows written before rows carried it)."""
    return row.get("meta") if isinstance(row.get("meta"), dict) else {}


def correct(parsed: str | None, sample: Sample) -> dict[str, float]:
    return {"correct": float(parsed == sample.answer)}


def mean_correct(rows: list[dict]) -> float:
    """Percentage of rows whose per-sample ``correct`` is 1."""
    return 100.0 * mean(float(r["correct"]) for r in rows)


def _answers(rows: list[dict]) -> tuple[list[str | None], list[str]]:
    return [parsed_of(r) for r in rows], [r["reference"] for r in rows]


def _asr_errors(parsed: str | None, sample: Sample) -> dict[str, float]:
    errors, words = word_errors(sample.answer, parsed or "")
    if not words:
        raise ValueError(f"empty reference transcript: {sample.answer!r}")
    return {"errors": float(errors), "ref_words": float(words), "wer": 100.0 * errors / words}


def _accuracy_of_rows(rows: list[dict]) -> float:
    return accuracy(*_answers(rows))


def _f1_of_rows(average: Literal["macro", "weighted"]) -> Callable[[list[dict]], float]:
    return lambda rows: f1_score(*_answers(rows), average)


def _acr_of_rows(rows: list[dict]) -> float:
    predictions, references = _answers(rows)
    return all_runs_correct_rate([p == r for p, r in zip(predictions, references)], [row["item"] for row in rows])


def _corpus_wer_of_rows(rows: list[dict]) -> float:
    """Corpus WER in %: all errors over all reference words (long samples weigh more), from the
    per-sample counts, so a summary does not rerun the edit distances."""
    return 100.0 * sum(r["errors"] for r in rows) / sum(r["ref_words"] for r in rows)


def _word_accuracy_of_rows(rows: list[dict]) -> float:
    """AudioMarathon's ASR leaderboard column: 100 - the mean per-sample WER (``word_accuracy`` in
    their Qwen2.5-Omni script). Negative when a model inserts more words than the references hold."""
    return 100.0 - mean(r["wer"] for r in rows)


METRICS: Registry[Metric] = Registry("metric")


def register_metric(metric: Metric) -> Metric:
    """Make a metric available to task YAML files under ``metric.name``."""
    return METRICS.register(metric.name, metric)


register_metric(Metric("accuracy", _accuracy_of_rows, correct))
register_metric(Metric("f1_macro", _f1_of_rows("macro"), correct))
register_metric(Metric("f1_weighted", _f1_of_rows("weighted"), correct))
# AA, the mean accuracy over all runs of all items, is the accuracy over variants (pooled).
register_metric(Metric("aa", _accuracy_of_rows, correct))
register_metric(Metric("acr", _acr_of_rows, correct))
register_metric(Metric("wer", _corpus_wer_of_rows, _asr_errors, higher_is_better=False))
register_metric(Metric("word_accuracy", _word_accuracy_of_rows, _asr_errors))
