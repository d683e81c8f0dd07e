"""The benchmark harness, in two halves over shared tasks and timing.

- ``tasks``: declarative YAML tasks, the dataset readers, answer parsers and metrics;
- ``sweep``: models x tasks x methods x ratios on real prompts (results, summary, plots, report);
- ``bench``: prefill and decode timed at real model shapes with random weights;
- ``demo``: the embedded demo model and its synthetic suite; ``official``: official scoring rules;
- ``cli``: the ``kvprune`` command, with ``options`` (what sweep and bench share), ``timing`` (the one
  timing primitive), ``audio`` (audio files to waveforms) and ``channels`` (how a file's channels
  become clips).
"""
