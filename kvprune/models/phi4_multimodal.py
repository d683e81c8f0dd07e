"""Phi-4-multimodal. Its checkpoints keep a speech LoRA adapter in ``speech-lora/``, trained with
the audio path: ``load_model`` loads and activates it (peft, the ``lora`` extra). Its LoRA layers
wrap the projections inside the decoder layers kvprune hooks, so pruning works the same with it.
Audio goes in whole."""

import math
from dataclasses import dataclass

import torch
from transformers import Phi4MultimodalProcessor

from . import tiny
from .audio_format import AudioFormat, padding_mask
from .audio_only import processor_loader
from .base import ModelFamily, register_family
from .parts import Loading, Prompting, Structure, Tiny
from .prompting import SAMPLING_RATE

WINDOW, HOP = 400, 160  # its feature extractor's STFT, in samples


class AudioOnlyPhi4Processor(Phi4MultimodalProcessor):
    """``Phi4MultimodalProcessor`` with only its audio feature extractor and tokenizer.

    Like the ``audio_only`` forms of the Omni processors (its audio part is named ``audio_processor``):
    the stock one insists on an image processor, which needs torchvision."""

    def __init__(self, audio_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token, self.image_token_id = tokenizer.image_token, tokenizer.image_token_id
        self.audio_token, self.audio_token_id = tokenizer.audio_token, tokenizer.audio_token_id
        # skip Phi4MultimodalProcessor.__init__, which passes an image processor up
        super(Phi4MultimodalProcessor, self).__init__(audio_processor, tokenizer, chat_template=chat_template, **kwargs)


@dataclass(frozen=True)
class Phi4Audio(AudioFormat):
    """Its feature extractor's frames (400-sample windows every 160 samples, none partial: 98 per
    second of 16 kHz audio), reduced 8x by the conformer, a partial group counting whole (12.5
    tokens/s); a clip's features are padded to a whole number of tokens, whose count goes in as
    ``audio_embed_sizes``. As the processor does, a padding mask comes only with several clips."""

    def frames(self, config, seconds):
        samples = round(seconds * SAMPLING_RATE)
        return max(1, (samples - WINDOW) // HOP + 1)

    def piece_tokens(self, config, frames):
        return math.ceil(frames / config.audio_config.time_reduction)

    def features(self, config, clip_frames, generator=None):
        audio = config.audio_config
        sizes = [self.piece_tokens(config, frames) for frames in clip_frames]
        width = max(sizes) * audio.time_reduction
        mels = torch.randn(len(sizes), width, audio.input_size, generator=generator)
        features = dict(audio_input_features=mels, audio_embed_sizes=torch.tensor(sizes))
        if len(sizes) > 1:
            features["audio_attention_mask"] = padding_mask([n * audio.time_reduction for n in sizes], width)
        return features


TINY = dict(
    **tiny.TEXT,
    audio_config=dict(
        hidden_size=32,
        intermediate_size=32,
        num_blocks=1,
        num_attention_heads=2,
        ext_pw_out_channel=32,
        depthwise_separable_out_channel=32,
        nemo_conv_channels=32,
        input_size=tiny.MELS,
        audio_token_id=tiny.AUDIO_TOKEN,
        time_reduction=8,
    ),
    vision_config=dict(
        hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_token_id=tiny.IMAGE_TOKEN
    ),
    original_max_position_embeddings=tiny.TEXT["max_position_embeddings"],
)

PHI4_MULTIMODAL = register_family(
    ModelFamily(
        name="phi4_multimodal",
        display_name="Phi-4-multimodal",
        model_class="Phi4MultimodalForCausalLM",
        prompting=Prompting(
            audio_format=Phi4Audio(),
            llm_tokens_per_second=12.5,
            long_audio="whole (its feature extractor neither chunks nor truncates)",
        ),
        tiny=Tiny(TINY),
        structure=Structure(
            decoder_paths=("model",),
            audio_token_attrs=("audio_config.audio_token_id", "audio_token_id"),
            encoder_start_paths=("model.embed_tokens_extend.audio_embed",),
            encoder_end_paths=("model.embed_tokens_extend.audio_embed",),
        ),
        loading=Loading(adapters={"speech": "speech-lora"}, load_processor=processor_loader(AudioOnlyPhi4Processor)),
    )
)
