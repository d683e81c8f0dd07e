"""harness/bench: kvprune bench's bookkeeping on the CPU, and the GPU session script."""
