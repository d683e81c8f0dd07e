"""The presses, one module each. Importing this package registers them by name."""

from .fastv import FastVPress
from .random import RandomPress
from .frame import FramePress
from .dart import DARTPress

__all__ = ["DARTPress", "FastVPress", "FramePress", "RandomPress"]
