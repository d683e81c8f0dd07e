"""The core: presses as context managers, the engine's parts, method specs, the registry, static caches, split models."""
