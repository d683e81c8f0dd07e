"""kvprune.generation: the generation engine against model.generate."""
