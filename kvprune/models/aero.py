"""Aero-1-Audio (lmms-lab, remote code): Qwen2-Audio's Whisper encoder, a linear projector and a
Qwen2ForCausalLM held as ``language_model``. Long audio is cut into 30 s chunks, one audio item
each, as its model card does. Loading it needs ``trust_remote_code=True``.

Because Aero-1's modeling code is not part of transformers, this module also defines a stand-in with
its module layout and its inputs (``AeroForConditionalGeneration``): the test suite and the harness's
speed measurements build that, so the paths and the placeholder attribute declared here are the ones
exercised.
"""

import torch
import torch.nn as nn
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2_audio.configuration_qwen2_audio import Qwen2AudioEncoderConfig
from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioEncoder

from . import tiny
from .audio_format import WhisperChunkAudio
from .base import ModelFamily, register_family
from .parts import Loading, Prompting, Structure, Tiny
from .prompting import ChatFormat

build_inputs = ChatFormat(
    audio_item=lambda wave: {"type": "audio_url", "audio": "placeholder"}, chunk_seconds=30.0, audio_kwarg="audios"
)


class AeroConfig(PreTrainedConfig):
    """Stand-in for Aero-1's remote-code config: a Qwen2 text config and a Qwen2-Audio encoder config."""

    model_type = "aero"
    sub_configs = {"text_config": Qwen2Config, "audio_config": Qwen2AudioEncoderConfig}

    def __init__(self, text_config=None, audio_config=None, audio_token_index=151646, **kwargs):
        self.text_config = _sub_config(Qwen2Config, text_config)
        self.audio_config = _sub_config(Qwen2AudioEncoderConfig, audio_config)
        self.audio_token_index = audio_token_index  # Qwen2-Audio's <|AUDIO|> by default
        super().__init__(**kwargs)


def _sub_config(config_class, value):
    return value if isinstance(value, PreTrainedConfig) else config_class(**(value or {}))


class AeroForConditionalGeneration(PreTrainedModel, GenerationMixin):
    """The module layout and inputs of lmms-lab's Aero-1-Audio (``audio_tower``,
    ``audio_modal_projector``, a Qwen2ForCausalLM as ``language_model``; ``audio_values`` with an
    ``audio_attention_mask``), its audio merge reduced to the essentials: each chunk's embeddings
    are cut to the length its mask gives, and a placeholder count that differs is refused."""

    config_class = AeroConfig
    _supports_sdpa = True
    _supports_attention_backend = True

    def __init__(self, config: AeroConfig):
        super().__init__(config)
        self.audio_tower = Qwen2AudioEncoder(config.audio_config)
        self.audio_modal_projector = nn.Linear(config.audio_config.d_model, config.text_config.hidden_size)
        self.language_model = Qwen2ForCausalLM(config.text_config)
        self.post_init()

    def get_input_embeddings(self):
        return self.language_model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.language_model.get_output_embeddings()

    def forward(
        self, input_ids=None, audio_values=None, audio_attention_mask=None, position_ids=None, logits_to_keep=0, **kwargs
    ):
        embeds = self.get_input_embeddings()(input_ids)
        placeholders = input_ids == self.config.audio_token_index
        if audio_values is not None and placeholders.any():
            lengths = self.audio_tower._get_feat_extract_output_lengths(audio_attention_mask.sum(-1))[1]
            if int(lengths.sum()) != int(placeholders.sum()):
                raise ValueError(
                    f"Audio features and audio tokens do not match: tokens {int(placeholders.sum())}, "
                    f"features {int(lengths.sum())}"
                )
            encoded = self.audio_modal_projector(self.audio_tower(audio_values).last_hidden_state)
            encoded = torch.cat([chunk[:n] for chunk, n in zip(encoded, lengths.tolist())])
            embeds = embeds.masked_scatter(placeholders[..., None], encoded.to(embeds.dtype))
        return self.language_model(inputs_embeds=embeds, position_ids=position_ids, logits_to_keep=logits_to_keep, **kwargs)


TINY = dict(
    text_config=dict(tiny.TEXT),
    audio_config=dict(**tiny.WHISPER, max_source_positions=64),  # 128-frame chunks of 32 tokens
    audio_token_index=tiny.AUDIO_TOKEN,
)

AERO = register_family(
    ModelFamily(
        name="aero",
        display_name="Aero-1-Audio",
        model_class=AeroForConditionalGeneration,
        prompting=Prompting(
            audio_format=WhisperChunkAudio(features_name="audio_values", mask_name="audio_attention_mask"),
            llm_tokens_per_second=25.0,
            build_inputs=build_inputs,
            long_audio="30 s chunks, one audio item each (its model card's recipe; kvprune's prompt builder cuts them)",
            max_clip_seconds=30.0,
        ),
        tiny=Tiny(TINY),
        structure=Structure(
            decoder_paths=("language_model.model",),
            audio_token_attrs=("audio_token_index", "audio_token_id"),
            encoder_end_paths=("audio_modal_projector",),
        ),
        loading=Loading(model_types={"aero": ""}),  # remote code: AutoModelForCausalLM with trust_remote_code
    )
)
