"""The judged parts of grading: a task's refine step and its judged metrics, which need a judge
(``harness.judge``; a sweep's ``--judge``).

A task's ``refine`` names a step (``REFINERS``) that, when the sweep has a judge, rewrites the
model's reply before it is parsed and scored, as a benchmark's official pipeline does (AVI-Bench's
refine step: ``benchmarks/avibench/refine.py``). Without a judge the reply is scored as it is. A judged
metric (``Metric.judged``) is given the judge as ``judge=``; a task with one cannot run without a
judge. A judge that keeps failing raises ``JudgeError``: the sample's grade is that error (an error
row), never a score.
"""

from __future__ import annotations

from collections.abc import Callable

from kvprune.registry import Registry

from ..judge import Judge
from .sample import Sample

#: refine step name -> ``fn(judge, sample, reply) -> refined reply``
REFINERS: Registry[Callable[[Judge, Sample, str], str | None]] = Registry("refine step")


class JudgeNeeded(ValueError):
    """A judged metric was asked to score without a judge; the message says how to give one."""


def require_judge(judge: Judge | None, what: str) -> Judge:
    if judge is None:
        raise JudgeNeeded(f"{what} needs an LLM judge: run the sweep with --judge (openai:<base URL>@<model> or hf:<folder>).")
    return judge
