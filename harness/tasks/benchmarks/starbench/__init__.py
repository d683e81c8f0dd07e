"""STAR-Bench (InternLM/StarBench): its parts as tasks, its parser, variants and metrics. See README.md."""

from . import metrics, parsers, variants  # noqa: F401  (they register)
