"""Granite Speech (IBM): a conformer CTC encoder, a windowed Q-Former projector and a Granite decoder.

Its feature extractor stacks pairs of 80-bin log-mel frames (100 frames/s) into 50 encoder
frames/s; the projector turns each window of 15 encoder frames into 3 tokens (10 tokens/s). Audio
goes in whole. The checkpoints also carry a LoRA adapter that ``generate`` switches on whenever
audio is given (peft); the decoder layers it wraps are the ones kvprune hooks.
"""

import math
from dataclasses import dataclass

import torch

from . import tiny
from .audio_format import AudioFormat, padding_mask
from .base import ModelFamily, register_family
from .parts import Prompting, Structure, Tiny


@dataclass(frozen=True)
class GraniteAudio(AudioFormat):
    """Mel frames as its feature extractor counts them (one per 10 ms hop, plus one: centred STFT),
    halved by stacking, padded to whole projector windows of ``window_size`` encoder frames that
    each give ``window_size // downsample_rate`` tokens. Features are (clips, encoder frames,
    2 x mel bins), with ``input_features_mask`` marking each clip's tokens."""

    def frames(self, config, seconds):
        return super().frames(config, seconds) + 1

    def piece_tokens(self, config, frames):
        blocks = math.ceil((frames // 2) / config.window_size)
        return blocks * (config.window_size // config.downsample_rate)

    def features(self, config, clip_frames, generator=None):
        width = max(frames // 2 for frames in clip_frames)
        stacked = torch.randn(len(clip_frames), width, config.encoder_config.input_dim, generator=generator)
        sizes = [self.piece_tokens(config, frames) for frames in clip_frames]
        return dict(input_features=stacked, input_features_mask=padding_mask(sizes, max(sizes)))


TINY = dict(
    encoder_config=dict(
        input_dim=2 * tiny.MELS, num_layers=2, hidden_dim=32, num_heads=2, dim_head=16, output_dim=8,
        context_size=20, max_pos_emb=32, feedforward_mult=2, conv_kernel_size=3,
    ),
    projector_config=dict(
        model_type="blip_2_qformer", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, encoder_hidden_size=32, cross_attention_frequency=1,
    ),
    # attention scaled by head_dim ** -0.5 as in the other families' tiny decoders (the checkpoints scale by
    # 1 / head_dim). HF's default of 1.0 leaves the logits unscaled and so peaked that stock decoding on a
    # static and on a dynamic cache differ by float32 rounding beyond any other family's. The other
    # multipliers stay 1.0: with random weights, the checkpoints' (embeddings x 12, residual branches x 0.22)
    # let each token's embedding choose the next token, and greedy decoding repeats one id.
    text_config=dict(
        model_type="granite", **tiny.TEXT,
        attention_multiplier=(tiny.TEXT["hidden_size"] // tiny.TEXT["num_attention_heads"]) ** -0.5,
    ),
    window_size=5,  # one token per window of 5 encoder frames: 10 tokens/s as the checkpoints, any count possible
    downsample_rate=5,
    audio_token_index=tiny.AUDIO_TOKEN,
    has_lora_adapter=False,
)

GRANITE_SPEECH = register_family(
    ModelFamily(
        name="granite_speech",
        display_name="Granite Speech",
        model_class="GraniteSpeechForConditionalGeneration",
        prompting=Prompting(
            audio_format=GraniteAudio(),
            llm_tokens_per_second=10.0,
            long_audio="whole (its feature extractor neither chunks nor truncates; the encoder attends in 4 s blocks)",
        ),
        tiny=Tiny(TINY),
        structure=Structure(encoder_start_paths=("model.encoder",), encoder_end_paths=("model.projector",)),
        notes="Real checkpoints carry a speech LoRA adapter (peft) that generate() enables when audio is given.",
    )
)
