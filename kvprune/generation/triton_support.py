"""Triton where this build of torch comes with it (CUDA builds do; the CPU build has none): the decode kernels'
modules import ``triton`` and ``tl`` from here, both ``None`` without it, and define their kernels only where they
are not."""

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the torch build
    triton = tl = None

__all__ = ["tl", "triton"]
