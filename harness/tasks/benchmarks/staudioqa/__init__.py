"""ST-AudioQA (provisional): its three tasks and metrics. See README.md."""

from . import metrics  # noqa: F401  (it registers)
