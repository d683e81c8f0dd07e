"""AVI-Bench (FudanCVL/AVI-Bench): its 15 tasks, their layout, metrics, suite levels and refine step. See README.md."""

from . import layout, metrics  # noqa: F401  (they register)
