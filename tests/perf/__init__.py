"""pytest-benchmark microbenchmarks, skipped by the default run (python -m pytest tests/perf --benchmark-only)."""
