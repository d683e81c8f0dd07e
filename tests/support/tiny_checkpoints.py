"""Tiny checkpoints on disk, as ``save_pretrained`` writes them: a tiny model of a family and its real
processor class (``tiny_processors``), for what loading by folder and building prompts through the
family's processor are tested on."""

from __future__ import annotations

from pathlib import Path

import torch

from kvprune.models import FAMILIES
from tests.support.tiny_processors import processor_and_config


def checkpoint(name: str, folder: Path) -> Path:
    """Write the tiny model of family ``name`` and its processor to ``folder`` (stock processor
    classes only: a substitute such as Aero-1's cannot be loaded back by ``AutoProcessor``)."""
    processor, config = processor_and_config(name, folder)
    torch.manual_seed(0)
    FAMILIES.get(name).build(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def qwen2_audio_checkpoint(folder: Path) -> Path:
    """Qwen2-Audio's, whose encoder takes the processor's 30 s chunks of 3000 frames."""
    return checkpoint("qwen2_audio", folder)
