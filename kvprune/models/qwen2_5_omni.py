"""Qwen2.5-Omni (3B, 7B): the thinker alone or inside the full model with talker.

Audio goes in whole (no chunking): the processor's feature extractor covers up to its
``chunk_length`` (300 s on the released checkpoints) and the encoder windows it internally.
"""

from types import SimpleNamespace

from transformers import AutoProcessor, Qwen2_5OmniProcessor
from transformers.utils import is_torchvision_available

from .base import ModelFamily, register_family
from .prompting import chat_template_inputs

_TOKEN_ATTRIBUTES = (
    "image_token", "audio_token", "video_token", "vision_bos_token", "vision_eos_token",
    "audio_bos_token", "audio_eos_token", "image_token_id", "audio_token_id", "video_token_id",
)


class AudioOnlyOmniProcessor(Qwen2_5OmniProcessor):
    """``Qwen2_5OmniProcessor`` with only its feature extractor and tokenizer (text and audio input).

    The stock processor insists on a video processor, and transformers' video processors need
    torchvision, which kvprune does not depend on. This keeps the standard text and audio path
    (chat template, ``<|AUDIO|>`` expansion, Whisper features) and reads the same saved files,
    ignoring their image and video parts.
    """

    def __init__(self, feature_extractor=None, tokenizer=None, chat_template=None):
        # skip Qwen2_5OmniProcessor.__init__, which passes image and video processors up
        super(Qwen2_5OmniProcessor, self).__init__(feature_extractor, tokenizer, chat_template=chat_template)
        for name in _TOKEN_ATTRIBUTES:
            setattr(self, name, getattr(tokenizer, name))

    # transformers 5.17 reads the merge sizes even when no image or video is given; nothing else is read
    image_processor = video_processor = SimpleNamespace(merge_size=1)


def load_processor(name_or_path, trust_remote_code: bool = False):
    """The checkpoint's processor; its audio-only form where torchvision is not installed."""
    if is_torchvision_available():
        return AutoProcessor.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    return AudioOnlyOmniProcessor.from_pretrained(name_or_path)


QWEN2_5_OMNI = register_family(
    ModelFamily(
        name="qwen2_5_omni",
        display_name="Qwen2.5-Omni",
        entry_paths={
            "Qwen2_5OmniThinkerForConditionalGeneration": "",
            "Qwen2_5OmniForConditionalGeneration": "thinker",
        },
        decoder_paths=("model.language_model", "model"),
        audio_token_attrs=("audio_token_index", "audio_token_id"),
        llm_tokens_per_second=25.0,
        model_types={
            "qwen2_5_omni": "Qwen2_5OmniForConditionalGeneration",
            "qwen2_5_omni_thinker": "Qwen2_5OmniThinkerForConditionalGeneration",
        },
        build_inputs=chat_template_inputs,
        load_processor=load_processor,
        # text answers only: do not build the talker and its vocoder
        load_kwargs={"Qwen2_5OmniForConditionalGeneration": {"enable_audio_output": False}},
        notes="Audio placeholders are framed by audio start/end tokens, which are never pruned.",
    )
)
