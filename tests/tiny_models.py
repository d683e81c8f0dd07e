"""Tiny random models of every supported family, built from configs in code, and matching inputs.

A prompt is described per batch row as segments: ``("text", k)`` for k text tokens or
``("audio", n)`` for one clip of n audio tokens. ``TinyFamily.inputs`` turns such rows into the
left-padded ``input_ids`` and the family's audio features, sized so that the audio encoder yields
exactly n embeddings per clip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
from transformers import (
    GenerationMixin,
    Phi4MultimodalConfig,
    Phi4MultimodalForCausalLM,
    PreTrainedConfig,
    PreTrainedModel,
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2_5OmniThinkerConfig,
    Qwen2_5OmniThinkerForConditionalGeneration,
    VoxtralConfig,
    VoxtralForConditionalGeneration,
)
from transformers.models.qwen2_audio.configuration_qwen2_audio import Qwen2AudioEncoderConfig
from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioEncoder

VOCAB = 128
PAD = 0
AUDIO = 100
AUDIO_START, AUDIO_END = 101, 102
N_LAYERS = 4
TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=N_LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    initializer_range=0.2,  # large weights give varied greedy tokens instead of one repeated id
    pad_token_id=PAD,
    bos_token_id=1,
    eos_token_id=2,
)
MELS = 16


@dataclass
class TinyFamily:
    name: str
    build: Callable[[str], nn.Module]  # attn_implementation -> model
    features: Callable[[list[int]], dict]  # clip lengths (batch order) -> audio keyword arguments
    frame_audio: bool = False  # wrap each clip in audio start/end markers (Qwen2.5-Omni)
    clip_multiple: int = 1  # clip lengths the encoder can produce are multiples of this

    def text_ids(self, rows, seed: int = 0) -> list[list[int]]:
        generator = torch.Generator().manual_seed(seed)
        out = []
        for row in rows:
            ids: list[int] = []
            for kind, n in row:
                if kind == "text":
                    ids += torch.randint(10, 90, (n,), generator=generator).tolist()
                else:
                    run = [AUDIO] * n
                    ids += [AUDIO_START, *run, AUDIO_END] if self.frame_audio else run
            out.append(ids)
        return out

    def inputs(self, rows, seed: int = 0) -> dict:
        """Left-padded batch for ``rows``; ``seed`` fixes both the text tokens and the audio features."""
        ids = self.text_ids(rows, seed)
        width = max(len(r) for r in ids)
        input_ids = torch.full((len(ids), width), PAD, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for b, r in enumerate(ids):
            input_ids[b, width - len(r) :] = torch.tensor(r)
            attention_mask[b, width - len(r) :] = 1
        clips = [n for row in rows for kind, n in row if kind == "audio"]
        torch.manual_seed(seed + 1)
        features = self.features(clips) if clips else {}
        return dict(input_ids=input_ids, attention_mask=attention_mask, **features)


def _seeded(build):
    def wrapped(attn_implementation: str = "sdpa"):
        torch.manual_seed(0)
        return build(attn_implementation).eval()

    return wrapped


# -- Qwen2.5-Omni thinker ---------------------------------------------------------------------------
def omni_config() -> Qwen2_5OmniThinkerConfig:
    return Qwen2_5OmniThinkerConfig(
        audio_config=dict(
            num_mel_bins=MELS, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
            d_model=32, output_dim=TEXT["hidden_size"], n_window=8, max_source_positions=1500,
        ),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=64),
        text_config=dict(**TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])),
        audio_token_index=AUDIO, audio_start_token_id=AUDIO_START, audio_end_token_id=AUDIO_END,
        image_token_index=103, video_token_index=104, vision_start_token_id=105,
        initializer_range=0.2,
    )


def _omni_features(clips: list[int]) -> dict:
    frames = [4 * n - 1 for n in clips]  # conv stride 2 then pool 2: 4n-1 mel frames -> n tokens
    width = max(frames)
    mask = torch.zeros(len(clips), width, dtype=torch.long)
    for i, f in enumerate(frames):
        mask[i, :f] = 1
    return dict(input_features=torch.randn(len(clips), MELS, width), feature_attention_mask=mask)


OMNI = TinyFamily(
    name="qwen2_5_omni",
    build=_seeded(lambda attn: Qwen2_5OmniThinkerForConditionalGeneration._from_config(omni_config(), attn_implementation=attn)),
    features=_omni_features,
    frame_audio=True,
)


# -- Qwen2-Audio ------------------------------------------------------------------------------------
QWEN2_AUDIO_FRAMES = 128  # 2 * max_source_positions


def _qwen2_audio_config() -> Qwen2AudioConfig:
    return Qwen2AudioConfig(
        audio_config=dict(
            num_mel_bins=MELS, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
            d_model=32, max_source_positions=QWEN2_AUDIO_FRAMES // 2,
        ),
        text_config=dict(model_type="qwen2", **TEXT),
        audio_token_index=AUDIO,
        initializer_range=0.2,
    )


def _qwen2_audio_features(clips: list[int]) -> dict:
    mask = torch.zeros(len(clips), QWEN2_AUDIO_FRAMES, dtype=torch.long)
    for i, n in enumerate(clips):
        mask[i, : 4 * n - 1] = 1
    return dict(input_features=torch.randn(len(clips), MELS, QWEN2_AUDIO_FRAMES), feature_attention_mask=mask)


QWEN2_AUDIO = TinyFamily(
    name="qwen2_audio",
    build=_seeded(lambda attn: Qwen2AudioForConditionalGeneration._from_config(_qwen2_audio_config(), attn_implementation=attn)),
    features=_qwen2_audio_features,
)


# -- Voxtral ----------------------------------------------------------------------------------------
VOXTRAL_CHUNK_FRAMES, VOXTRAL_TOKENS_PER_CHUNK = 32, 4


def _voxtral_config() -> VoxtralConfig:
    return VoxtralConfig(
        audio_config=dict(
            num_mel_bins=MELS, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            hidden_size=16, max_source_positions=VOXTRAL_CHUNK_FRAMES // 2,
        ),
        text_config=dict(**TEXT, head_dim=16),
        audio_token_id=AUDIO,
    )


def _voxtral_features(clips: list[int]) -> dict:
    chunks = sum(n // VOXTRAL_TOKENS_PER_CHUNK for n in clips)  # each 30 s chunk stacks on the batch axis
    return dict(input_features=torch.randn(chunks, MELS, VOXTRAL_CHUNK_FRAMES))


VOXTRAL = TinyFamily(
    name="voxtral",
    build=_seeded(lambda attn: VoxtralForConditionalGeneration._from_config(_voxtral_config(), attn_implementation=attn)),
    features=_voxtral_features,
    clip_multiple=VOXTRAL_TOKENS_PER_CHUNK,
)


# -- Phi-4-multimodal -------------------------------------------------------------------------------
def _phi4_config() -> Phi4MultimodalConfig:
    return Phi4MultimodalConfig(
        **TEXT,
        audio_config=dict(
            hidden_size=32, intermediate_size=32, num_blocks=1, num_attention_heads=2, ext_pw_out_channel=32,
            depthwise_separable_out_channel=32, nemo_conv_channels=32, input_size=MELS, audio_token_id=AUDIO,
            time_reduction=8,
        ),
        vision_config=dict(hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_token_id=103),
        original_max_position_embeddings=4096,
    )


def _phi4_features(clips: list[int]) -> dict:
    frames = 8 * max(clips)  # time reduction 8
    mask = torch.zeros(len(clips), frames, dtype=torch.bool)
    for i, n in enumerate(clips):
        mask[i, : 8 * n] = True
    return dict(
        audio_input_features=torch.randn(len(clips), frames, MELS),
        audio_embed_sizes=torch.tensor(clips),
        audio_attention_mask=mask,
    )


PHI4 = TinyFamily(
    name="phi4_multimodal",
    build=_seeded(lambda attn: Phi4MultimodalForCausalLM._from_config(_phi4_config(), attn_implementation=attn)),
    features=_phi4_features,
)


# -- Aero-1-Audio stand-in --------------------------------------------------------------------------
class AeroConfig(PreTrainedConfig):
    """Stand-in for Aero-1's remote-code config: a Qwen2 text config and a Whisper-style encoder."""

    model_type = "aero"
    sub_configs = {"text_config": Qwen2Config, "audio_config": Qwen2AudioEncoderConfig}

    def __init__(self, text_config=None, audio_config=None, audio_token_index=AUDIO, **kwargs):
        self.text_config = Qwen2Config(**text_config) if isinstance(text_config, dict) else text_config
        self.audio_config = Qwen2AudioEncoderConfig(**audio_config) if isinstance(audio_config, dict) else audio_config
        self.audio_token_index = audio_token_index
        super().__init__(**kwargs)


class AeroForConditionalGeneration(PreTrainedModel, GenerationMixin):
    """The module layout of lmms-lab's Aero-1-Audio (audio_tower, audio_modal_projector and a
    Qwen2ForCausalLM as ``language_model``), with its audio merge reduced to the essentials."""

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

    def forward(self, input_ids=None, audio_values=None, audio_output_lengths=None, position_ids=None, **kwargs):
        embeds = self.get_input_embeddings()(input_ids)
        audio = input_ids == self.config.audio_token_index
        if audio_values is not None and audio.any():
            encoded = self.audio_modal_projector(self.audio_tower(audio_values).last_hidden_state)
            encoded = torch.cat([e[:n] for e, n in zip(encoded, audio_output_lengths.tolist())])
            embeds = embeds.masked_scatter(audio[..., None], encoded.to(embeds.dtype))
        return self.language_model(inputs_embeds=embeds, position_ids=position_ids, **kwargs)


AERO_FRAMES = 128


def _aero_config() -> AeroConfig:
    return AeroConfig(
        text_config=dict(**TEXT),
        audio_config=dict(
            num_mel_bins=MELS, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
            d_model=32, max_source_positions=AERO_FRAMES // 2,
        ),
        initializer_range=0.2,
    )


def _aero_features(clips: list[int]) -> dict:
    return dict(audio_values=torch.randn(len(clips), MELS, AERO_FRAMES), audio_output_lengths=torch.tensor(clips))


def _build_aero(attn):
    config = _aero_config()
    config._attn_implementation = attn
    config.text_config._attn_implementation = attn
    config.audio_config._attn_implementation = attn
    return AeroForConditionalGeneration(config)


AERO = TinyFamily(name="aero", build=_seeded(_build_aero), features=_aero_features)

FAMILIES = {f.name: f for f in (OMNI, PHI4, VOXTRAL, AERO, QWEN2_AUDIO)}
