"""The benchmarks, one folder each (``tasks.benchmark``: their YAMLs are found there by name).

Importing this package imports each benchmark that has Python of its own, which registers its
metrics, parsers, variants and layout in the shared registries: one line per benchmark (a folder
of YAML files alone, such as the demo's, needs none).
"""

from . import audiomarathon  # noqa: F401  (each registers what its folder adds)
from . import avibench  # noqa: F401
from . import mmar  # noqa: F401
from . import mmau  # noqa: F401
from . import starbench  # noqa: F401
from . import staudioqa  # noqa: F401
