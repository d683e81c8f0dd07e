"""Benchmark tasks as declarative YAML: the task model, the dataset readers, answer parsers and metrics.

A registry's module defines it and never imports the modules that fill it: importing this package
imports them (the benchmarks' metrics of ``official_metrics``; the layouts of ``dataset_layouts``
register as that package is imported; AVI-Bench's metrics are ``avibench_metrics``), so every built-in
is registered whichever module is used.
"""

from . import avibench_metrics, dataset_layouts, official_metrics  # noqa: F401  (they register the built-ins)
