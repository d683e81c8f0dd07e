"""harness/demo: the embedded demo suite and model."""
