"""MMAR and MMAR-Rubrics: their tasks and the judged rubric metrics. See README.md."""

from . import metrics  # noqa: F401  (it registers)
