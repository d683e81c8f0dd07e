"""Stock processors without their image and video parts, for machines without torchvision.

Omni-style processors (Qwen2.5-Omni, Qwen3-Omni, Gemma-3n) insist on image and video processors,
which need torchvision, which kvprune does not depend on. Their audio-only forms keep the standard
text and audio path (chat template, placeholder expansion, features) of the stock class and read the
same saved files, ignoring the image and video parts; the Omni families' get images and video back
through ``vision_frames`` (PIL, no torchvision). ``load_processor`` uses the stock processor wherever
torchvision is installed.
"""

from __future__ import annotations

from types import SimpleNamespace

from transformers import AutoProcessor, ProcessorMixin
from transformers.utils import is_torchvision_available

from .vision_frames import add_pil_vision


class AudioOnlyProcessor:
    """Mixin placed before a stock processor class: its ``__init__`` takes only the feature extractor
    and the tokenizer, and copies ``token_attributes`` from the tokenizer as the stock one does."""

    token_attributes: tuple[str, ...] = ()

    def __init__(self, feature_extractor=None, tokenizer=None, chat_template=None, **kwargs):
        for name in self.token_attributes:
            setattr(self, name, getattr(tokenizer, name))
        # skip the stock __init__, which passes image and video processors up
        ProcessorMixin.__init__(self, feature_extractor, tokenizer, chat_template=chat_template, **kwargs)

    # transformers 5.17 reads the merge sizes even when no image or video is given; nothing else is read
    image_processor = video_processor = SimpleNamespace(merge_size=1)


def processor_loader(audio_only: type, vision: bool = False):
    """``load_processor`` for a family: the checkpoint's processor, or ``audio_only`` without
    torchvision, given images and video back through ``vision_frames`` where ``vision`` (the Omni
    families)."""

    def load_processor(name_or_path, trust_remote_code: bool = False):
        if is_torchvision_available():
            return AutoProcessor.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        processor = audio_only.from_pretrained(name_or_path)
        return add_pil_vision(processor, name_or_path) if vision else processor

    return load_processor
