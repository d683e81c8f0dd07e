"""MMAU test-mini: its task, ``string_match`` and the ``answer_span`` parser. See README.md."""

from . import metrics, parsers  # noqa: F401  (they register)
