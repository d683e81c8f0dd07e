"""The embedded demo: a tiny trained Qwen2.5-Omni thinker for the synthetic audio suite.

    from kvprune.harness.demo import load_demo
    model, processor = load_demo()

Everything is built in code or shipped in the package: no downloads.
"""

from __future__ import annotations

from pathlib import Path

DEMO = "demo"  # the model name the harness (``--model demo``) reads as the embedded demo
DEMO_MODEL_DIR = Path(__file__).resolve().parent / "model"


def load_demo(device: str = "cpu"):
    """The trained demo model (eval mode) and its processor, via ``from_pretrained`` on ``DEMO_MODEL_DIR``."""
    if not (DEMO_MODEL_DIR / "config.json").is_file():
        raise FileNotFoundError(
            f"the demo model files are missing from {DEMO_MODEL_DIR}; train them with "
            "`python -m scripts.train_demo_model` (see harness/demo/TRAINING.md)"
        )
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    from kvprune.models.qwen2_5_omni import load_processor  # the audio-only form where torchvision is missing

    model = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(DEMO_MODEL_DIR).to(device).eval()
    return model, load_processor(DEMO_MODEL_DIR)
