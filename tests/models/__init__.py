"""The model families: declarations, processors, loading, LoRA adapters, fast audio encoders."""
