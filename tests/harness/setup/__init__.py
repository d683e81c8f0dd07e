"""harness/setup: what sweep and bench share (ratio lists, options, device checks)."""
