"""Benchmark tasks as declarative YAML: the task model, the dataset readers, answer parsers and metrics,
and the benchmarks' folders (``benchmarks/``).

A registry's module defines it and never imports the modules that fill it: importing this package
imports them (the layouts of ``dataset_layouts`` and each benchmark's registrations, as those
packages are imported), so every built-in is registered whichever module is used.
"""

from . import benchmarks, dataset_layouts  # noqa: F401  (they register the built-ins)
