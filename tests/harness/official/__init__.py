"""harness/official: the published benchmarks' scoring rules, against hand-worked values and transcriptions of the official code."""
