"""The presses, one module each. Importing this package registers them by name.

Token-dropping presses: fastv, random, frame, dart. Cache presses: knorm, random_kv, tova, snapkv,
streaming_llm, expected_attention, and the budget policies pyramidkv and adakv, which take their
scores from another cache press."""

from .fastv import FastVPress
from .random import RandomPress
from .frame import FramePress
from .dart import DARTPress
from .knorm import KNormPress
from .random_kv import RandomKVPress
from .tova import TOVAPress
from .snapkv import SnapKVPress
from .streaming_llm import StreamingLLMPress
from .expected_attention import ExpectedAttentionPress
from .pyramidkv import PyramidKVPress
from .adakv import AdaKVPress

__all__ = [
    "AdaKVPress", "DARTPress", "ExpectedAttentionPress", "FastVPress", "FramePress", "KNormPress", "PyramidKVPress",
    "RandomKVPress", "RandomPress", "SnapKVPress", "StreamingLLMPress", "TOVAPress",
]
