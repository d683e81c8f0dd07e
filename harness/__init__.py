"""The benchmark harness: tasks, metrics, the sweep runner, timing, results and plots."""
