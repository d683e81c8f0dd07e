"""The benchmark harness, in two halves over a shared setup, shared tasks and timing.

- ``setup``: what sweep and bench share before and around their runs (options, the configuration
  shape, ratio lists, device checks, the meta-device method check, the environment record);
- ``tasks``: declarative YAML tasks, the dataset readers, answer parsers and metrics;
- ``sweep``: models x tasks x methods x ratios on real prompts (results, summary, plots, report);
- ``bench``: prefill and decode timed at real model shapes with random weights;
- ``demo``: the embedded demo model and its synthetic suite; ``official``: official scoring rules,
  asking ``judge`` (an LLM judge) where a rule is judged;
- ``cli``: the ``kvprune`` command, with ``timing`` (the one timing primitive), ``audio`` (audio
  files to waveforms) and ``channels`` (how a file's channels become clips).

``sweep`` and ``bench`` are siblings: neither imports the other.
"""
