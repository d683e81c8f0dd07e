"""kvprune's generation engine: prefill under a press, decode on static caches of the pruned lengths
with a compiled step replayed as a CUDA graph (see ``generator``)."""

from .generator import ENGINE, FALLBACK, GenerationOutput, GenerationTiming, Generator, generate
from .decode_state import bucket_length

__all__ = ["ENGINE", "FALLBACK", "GenerationOutput", "GenerationTiming", "Generator", "bucket_length", "generate"]
