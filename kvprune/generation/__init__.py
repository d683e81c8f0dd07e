"""kvprune's generation engine: prefill under a press, decode on static caches of the pruned lengths
with a compiled step replayed as a CUDA graph (see ``generator``); stock ``generate`` timed alike
(``stock``), in one timing vocabulary (``timing``)."""

from .decode_state import bucket_length, unpruned_split
from .generator import Generator, generate
from .request import ENGINE, FALLBACK, GenerateRequest, GenerationObserver, GenerationOutput
from .stock import stock_generate
from .timing import Clock, Timing

__all__ = ["ENGINE", "FALLBACK", "Clock", "GenerateRequest", "GenerationObserver", "GenerationOutput", "Generator",
           "Timing", "bucket_length", "generate", "stock_generate", "unpruned_split"]
