"""Benchmark tasks as declarative YAML: the task model, the dataset readers, answer parsers and metrics."""
