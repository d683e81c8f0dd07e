"""harness/tasks: task files, dataset layouts, prompts, parsers, metrics."""
