"""AVI-Bench's tasks, stages and aggregates.

The task table is ``eval/eval.py``'s ``TASK_DEFS`` (FudanCVL/AVI-Bench): the data folder
``<levels>/<stage>/<TASK>/`` and the evaluator each task uses. The paper reports 14 tasks: VSQA is
released as ``VSQA_I`` and ``VSQA_V`` and scored pooled (``avibench.score_vsqa``).

Aggregates. The released code stops at per-task scores; the leaderboard (``docs/leaderboard/
data/results.json``) publishes, per model, four stage scores, an Overall and the taxonomy L1-L4.
In its three rows Overall is the mean of the four stage scores and L1 (Task-Adaptive) the mean of
the Perception, Understanding and Reasoning scores (to the published 2 decimals); those two are
given here. How a stage score is formed from its tasks is not in the released code; the mean of
its tasks' headline scores is assumed (``stage_scores``). L2 (Modality-Adaptive), L3
(Stage-Adaptive) and L4 (Domain-Adaptive) are defined in the paper only in words ("balance
between audio-dominant and visual-dominant tasks", "reasoning grounded in its perceptual and
conceptual prerequisites", "the gap between familiar and unfamiliar (Sensation) domains"); their
formulas are not in the released code nor in any public source found, so they are not computed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# task -> (stage folder, evaluator), in ``TASK_DEFS`` order
TASKS: dict[str, tuple[str, str]] = {
    "ASQA": ("sensation", "full_match"), "VSQA_I": ("sensation", "full_match"), "VSQA_V": ("sensation", "full_match"),
    "AVSQA": ("sensation", "avsqa"),
    "AMIC": ("perception", "mic"), "VMIC": ("perception", "mic"), "AVL": ("perception", "avl"),
    "AVM": ("perception", "full_match"),
    "AVR": ("understand", "retrieval"), "VAR": ("understand", "retrieval"), "AVC": ("understand", "caption"),
    "AVH": ("reasoning", "full_match"), "VAH": ("reasoning", "full_match"), "AVQA": ("reasoning", "full_match"),
    "AVLG": ("reasoning", "avlg"),
}
# the paper's 14 tasks per stage (VSQA pooled)
STAGES: dict[str, tuple[str, ...]] = {
    "perception": ("AMIC", "VMIC", "AVL", "AVM"),
    "understand": ("VAR", "AVR", "AVC"),
    "reasoning": ("AVH", "VAH", "AVQA", "AVLG"),
    "sensation": ("ASQA", "VSQA", "AVSQA"),
}
HEADLINE_KEYS = ("Average", "average")  # MIC, AVL, retrieval report "Average"; AVC "average" (FENSE)


def task_dir(task: str) -> str:
    """``<stage>/<TASK>``, the task's folder under the release's ``levels/``."""
    if task not in TASKS:
        raise ValueError(f"unknown AVI-Bench task {task!r}; the tasks are {list(TASKS)}")
    return f"{TASKS[task][0]}/{task}"


def headline(score: float | Mapping[str, float]) -> float:
    """A task's one number: the score itself, or the ``Average`` (``average``) of a dict score."""
    if not isinstance(score, Mapping):
        return float(score)
    for key in HEADLINE_KEYS:
        if key in score:
            return float(score[key])
    raise ValueError(f"a task score dict needs one of {HEADLINE_KEYS}, got keys {sorted(score)}")


def stage_scores(task_scores: Mapping[str, float | Mapping[str, float]]) -> dict[str, float]:
    """The mean headline score of each stage whose tasks are all scored (keys as in ``STAGES``,
    ``VSQA`` the pooled score); a stage missing a task is left out rather than averaged short."""
    unknown = set(task_scores) - {t for tasks in STAGES.values() for t in tasks}
    if unknown:
        raise ValueError(f"unknown AVI-Bench task scores {sorted(unknown)}; score VSQA_I and VSQA_V pooled as 'VSQA'")
    return {
        stage: float(np.mean([headline(task_scores[t]) for t in tasks]))
        for stage, tasks in STAGES.items() if all(t in task_scores for t in tasks)
    }


def overall(stages: Mapping[str, float]) -> float:
    """The leaderboard's Overall: the mean of the four stage scores."""
    return float(np.mean([stages[s] for s in _need(stages, tuple(STAGES))]))


def l1_task(stages: Mapping[str, float]) -> float:
    """L1, Task-Adaptive: the mean of the Perception, Understanding and Reasoning stage scores."""
    return float(np.mean([stages[s] for s in _need(stages, ("perception", "understand", "reasoning"))]))


def _need(stages: Mapping[str, float], names: tuple[str, ...]) -> tuple[str, ...]:
    missing = [s for s in names if s not in stages]
    if missing:
        raise ValueError(f"stage scores missing: {missing}")
    return names
