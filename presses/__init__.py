"""The presses, one module each. Importing this package registers them by name.

Token-dropping presses: fastv, random, frame, dart. Cache presses: knorm."""

from .fastv import FastVPress
from .random import RandomPress
from .frame import FramePress
from .dart import DARTPress
from .knorm import KNormPress

__all__ = ["DARTPress", "FastVPress", "FramePress", "KNormPress", "RandomPress"]
