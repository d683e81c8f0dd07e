"""AudioMarathon (DabDans/AudioMarathon): its ten tasks, their scripts' rules, the ``audiomarathon``
protocol's metrics and parsers, its duration buckets. See README.md."""

from . import metrics, parsers  # noqa: F401  (they register)
