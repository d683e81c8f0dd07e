"""What the benchmarks' scoring rules share, as plain functions over plain data (no other part of the
harness): each benchmark's own rules live in its folder (``harness/tasks/benchmarks/<name>/``).

- ``classification``: F1 and average precision as the official scorers get them from scikit-learn.
- ``edit_distance``: word-level edit distance, behind every WER.
- ``records``: reading a benchmark's metadata files (JSON, JSON lines, gzipped or not).
- ``durations``: audio-duration buckets (score against duration), the default ones and those a
  benchmark registers for its tasks.
"""
