"""harness/sweep: kvprune sweep end to end, its results folder, summaries, figures and report."""
