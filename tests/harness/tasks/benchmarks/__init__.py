"""harness/tasks/benchmarks: each benchmark's scoring rules, against hand-worked values and transcriptions of the official code, and its tasks."""
