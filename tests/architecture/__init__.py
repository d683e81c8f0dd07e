"""The architecture's rules as tests: the import drawing, module sizes, the core without the harness, and docs/architecture.md's "Where to add" followed to the letter."""
