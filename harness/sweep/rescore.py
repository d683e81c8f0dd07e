"""Stored outputs scored again when only what their score depends on changed.

A run's output depends on what its key holds (the model, settings, method, ratio, prompt and audio:
``identity``); its score also depends on the sample's gold answer, options, item and metadata, which
a row records as its ``grade_hash``. When a dataset's labels are fixed and nothing else changed, the
runs are done (their keys are in the folder) but their rows are out of date: each is graded again
from its stored output against the sample as it is now, and the new row appended (the old one stays,
and is no longer summarised). Nothing is generated again. Likewise ``--retry-errors`` grades the runs
whose grading the judge failed (an unreachable endpoint) again from their stored outputs.
"""

from __future__ import annotations

from dataclasses import replace

from ..setup.environment import now
from ..tasks.task import Task
from .identity import SweepPlan
from .plan import PlannedSample
from .rows import ResultRow
from .store import ResultStore, judge_failed, read_rows, unique_runs


def rescore(store: ResultStore, plan: SweepPlan, tasks: list[Task], samples: dict[str, list[PlannedSample]],
            judge=None) -> tuple[int, int]:
    """Grade again every stored run of ``samples`` (this process's share, per task) that ``plan``
    asks for and whose grade hash is out of date (the rows of both passes: a timing pass's rows are
    summarised for their timings), with the sweep's ``judge`` for judged grading; returns (runs
    scored again, samples they cover)."""
    by_task = {task.name: task for task in tasks}
    planned = {(name, p.sample.id): p for name, share in samples.items() for p in share}
    rows = [row for row in plan.select(read_rows(store.out_dir), graded=False) if (row.task, row.sample_id) in planned]
    current = {row.key for row in rows if plan.graded_now(row)}
    stale = unique_runs([row for row in rows if row.key not in current])
    for row in stale:
        store.append(regraded(row, by_task[row.task], planned[row.task, row.sample_id], judge))
    runs = {row.key._replace(pass_name=None) for row in stale}  # a run's timing-pass row is the same run
    return len(runs), len({(row.task, row.sample_id) for row in stale})


def regrade_judge_failures(store: ResultStore, plan: SweepPlan, tasks: list[Task],
                           samples: dict[str, list[PlannedSample]], judge) -> tuple[int, int]:
    """``--retry-errors`` with a judge: every run of ``samples`` whose grading the judge failed
    (``store.judge_failed``: its output is stored) graded again from that output; a row is appended
    for each that the judge now grades (one it fails again stays as it was). Returns (runs tried,
    runs graded)."""
    by_task = {task.name: task for task in tasks}
    planned = {(name, p.sample.id): p for name, share in samples.items() for p in share}
    rows = unique_runs([row for row in plan.select(read_rows(store.out_dir)) if (row.task, row.sample_id) in planned])
    failed = [row for row in rows if judge_failed(row)]
    graded = 0
    for row in failed:
        again = regraded(row, by_task[row.task], planned[row.task, row.sample_id], judge)
        if not judge_failed(again):
            store.append(again)
            graded += 1
    return len(failed), graded


def regraded(row: ResultRow, task: Task, planned: PlannedSample, judge=None) -> ResultRow:
    """``row`` graded again against ``planned``'s sample: its reference, item and metadata, parsed
    answer, scores and (for a failure of grading) error as a sweep writes them now; the output,
    timings and everything else as they were, with the time it was scored again (``rescored``)."""
    sample, failure = planned.sample, _failure(row)
    grade = task.grade(row.output, sample, judge, failure=failure)
    if failure is not None:  # the run failed: its error stays, whatever the grade
        error = row.error
    else:
        error = None if grade.error is None else f"{type(grade.error).__name__}: {grade.error}"
    return replace(row, scores={**row.scores, **_unanswered(task, sample, judge), **grade.scores}, reference=sample.answer,
                   item=sample.item, meta=sample.meta, grade_hash=planned.grade_hash, parsed=grade.parsed, error=error,
                   rescored=now())


def _failure(row: ResultRow) -> str | None:
    """The error message of a run that failed before its output (a row with an error and no output),
    without the exception's name the row gives it (``"ValueError: ..."``)."""
    if row.output is not None or not row.error:
        return None
    name, separator, message = row.error.partition(": ")
    return message if separator and name.isidentifier() else row.error


def _unanswered(task: Task, sample, judge=None) -> dict:
    """The scores of no answer: every per-sample number the task's metrics store, so that none of the
    old row's survives a grade that stores fewer (a grading error stores none)."""
    try:
        return task.score(None, sample, judge)
    except Exception:  # a metric that cannot score no answer (an empty reference transcript)
        return {}
