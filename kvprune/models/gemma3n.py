"""Gemma-3n (E2B, E4B), its audio path: a conformer encoder (USM) whose output is embedded into the
LLM. Every clip becomes the same 188 placeholders (its processor pads or truncates audio to 30 s;
shorter audio fills the rest with a padding embedding), framed by begin/end-of-audio tokens.

What pruning means here. The decoder carries four residual streams (AltUp, shape (4, B, S, D)) and
each layer also takes a per-layer input embedding of every token (B, S, P): the engine gathers both
to the kept tokens, the streams on their sequence axis 2. Its last ``num_kv_shared_layers`` layers
compute no keys of their own but attend to the cache of the last earlier layer of the same
attention type, so those must hold the same tokens: pruning starts at or before those source
layers, and a later press layer is refused. Cache presses compress the source layers, and the
sharing layers read what is left. Layers of sliding-window type hold only the last window of
tokens; the engine's bookkeeping is exact while prompt plus answer stay shorter than the window
(512 tokens in the checkpoints) and refuses longer ones. Both kinds of layer are why a pruning press
refuses Gemma-3n's static cache (``cache_implementation="static"``): the dynamic cache prunes it exactly.

Its vision tower is a timm model; ``build`` makes the model without it (the audio path never calls
it), so kvprune needs no timm. Loading a checkpoint builds it as usual.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn as nn
from transformers import Gemma3nProcessor

from . import tiny
from .audio_format import AudioFormat, padding_mask
from .audio_only import AudioOnlyProcessor, processor_loader
from .base import ModelFamily, register_family
from .layer_io import LayerIO
from .parts import Loading, Prompting, Structure, Tiny

CLIP_TOKENS = 188  # the processor's audio_seq_length and the config's audio_soft_tokens_per_image
MAX_SECONDS = 30.0  # its feature extractor truncates audio at 480,000 samples
FRAMES_PER_TOKEN = 16  # two stride-2 convolutions, then every 4th conformer frame


class AudioOnlyGemma3nProcessor(AudioOnlyProcessor, Gemma3nProcessor):
    """``Gemma3nProcessor`` with only its feature extractor and tokenizer (see ``audio_only``): each
    audio item becomes begin-of-audio, ``audio_seq_length`` placeholders, end-of-audio."""

    token_attributes = ("audio_token", "audio_token_id", "boa_token", "image_token", "image_token_id", "boi_token")
    image_processor = SimpleNamespace(model_input_names=[])

    def __init__(self, feature_extractor=None, tokenizer=None, chat_template=None, audio_seq_length=CLIP_TOKENS, **kwargs):
        self.audio_seq_length = audio_seq_length
        self.full_audio_sequence = f"\n\n{tokenizer.boa_token}{tokenizer.audio_token * audio_seq_length}{tokenizer.eoa_token}\n\n"
        super().__init__(feature_extractor, tokenizer, chat_template=chat_template, **kwargs)


@dataclass(frozen=True)
class Gemma3nAudio(AudioFormat):
    """One input per clip: log-mel frames (B, T, mels) with a validity mask, at most 30 s; the
    encoder keeps one embedding per 16 frames, padded to ``audio_soft_tokens_per_image``."""

    def frames(self, config, seconds):
        return min(super().frames(config, min(seconds, MAX_SECONDS)), self.max_frames(config))

    def max_frames(self, config) -> int:
        """The longest clip whose embeddings fit the fixed placeholder run."""
        return FRAMES_PER_TOKEN * config.audio_soft_tokens_per_image

    def fixed_tokens(self, config) -> int:
        return config.audio_soft_tokens_per_image

    def piece_tokens(self, config, frames):
        return config.audio_soft_tokens_per_image

    def frames_for(self, config, tokens):
        if tokens != self.fixed_tokens(config):
            raise ValueError(f"every Gemma-3n clip has {self.fixed_tokens(config)} audio tokens with this config, not {tokens}")
        return self.max_frames(config)

    def features(self, config, clip_frames, generator=None):
        width = max(clip_frames)
        mels = torch.randn(len(clip_frames), width, config.audio_config.input_feat_size, generator=generator)
        return dict(input_features=mels, input_features_mask=padding_mask(clip_frames, width))

    def placeholders(self, config, audio_token_id, n_tokens):
        return [config.boa_token_id, *super().placeholders(config, audio_token_id, n_tokens), config.eoa_token_id]


@dataclass(frozen=True)
class Gemma3nLayerIO(LayerIO):
    """AltUp streams (n, B, S, D), a per-layer input per token, KV sharing in the last layers."""

    hidden_axis: int = 2
    token_args: tuple[str, ...] = ("per_layer_input",)

    def stream(self, output, config):
        return output[config.altup_active_idx]

    def kv_sources(self, config):
        """Each sharing layer reads the last non-sharing layer of its own attention type."""
        first_shared = config.num_hidden_layers - config.num_kv_shared_layers
        if config.num_kv_shared_layers == 0:
            return {}
        kinds = config.layer_types
        last_of = {kind: max(j for j in range(first_shared) if kinds[j] == kind) for kind in set(kinds)}
        return {j: last_of[kinds[j]] for j in range(first_shared, config.num_hidden_layers)}


class _NoVisionTower(nn.Module):
    """Stands in for the timm vision tower, which audio prompts never call."""

    def forward(self, *args, **kwargs):
        raise NotImplementedError("this Gemma-3n model was built without its vision tower (kvprune builds audio only)")


@contextlib.contextmanager
def _without_vision_tower():
    """While building, the model's AutoModel makes everything but the vision config as usual."""
    from transformers.models.gemma3n import modeling_gemma3n

    auto = modeling_gemma3n.AutoModel

    class _AutoModel:
        @staticmethod
        def from_config(config, **kwargs):
            if config.model_type == "gemma3n_vision":
                return _NoVisionTower()
            return auto.from_config(config, **kwargs)

    modeling_gemma3n.AutoModel = _AutoModel
    try:
        yield
    finally:
        modeling_gemma3n.AutoModel = auto


def build(config, **kwargs) -> nn.Module:
    """Gemma3nForConditionalGeneration with random weights, without its vision tower."""
    from transformers import Gemma3nForConditionalGeneration

    with _without_vision_tower():
        return Gemma3nForConditionalGeneration._from_config(config, **kwargs)


# tiny vocabulary: text below 90, "vision" ids 90-95, "audio" ids 96-127 (embedded by the audio embedder,
# as Gemma-3n embeds ids from its audio offset on), which holds the placeholder and its begin/end markers
VISION_OFFSET, AUDIO_OFFSET = 90, 96
TINY_TEXT = dict(
    tiny.TEXT, num_hidden_layers=6, head_dim=16, hidden_size_per_layer_input=8, vocab_size_per_layer_input=VISION_OFFSET,
    laurel_rank=4, altup_num_inputs=2, sliding_window=512, num_kv_shared_layers=2,
    # layer 3 is the first full-attention layer (4 in the checkpoints), after the default press layer 2
    layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
                 "sliding_attention", "full_attention"],
    activation_sparsity_pattern=[0.0] * 6,
)
TINY = dict(
    text_config=TINY_TEXT,
    audio_config=dict(
        input_feat_size=tiny.MELS, hidden_size=32, conf_num_attention_heads=2, conf_num_hidden_layers=1,
        sscp_conv_channel_size=[8, 4], conf_attention_chunk_size=4, conf_attention_context_left=5,
        conf_conv_kernel_size=3, vocab_size=tiny.TEXT["vocab_size"] - AUDIO_OFFSET, vocab_offset=AUDIO_OFFSET,
    ),
    vision_config=dict(hidden_size=32, vocab_size=AUDIO_OFFSET - VISION_OFFSET, vocab_offset=VISION_OFFSET),
    audio_soft_tokens_per_image=12,
    audio_token_id=tiny.AUDIO_TOKEN,
    boa_token_id=tiny.AUDIO_START,
    eoa_token_id=tiny.AUDIO_END,
    image_token_id=tiny.IMAGE_TOKEN,
)

GEMMA3N = register_family(
    ModelFamily(
        name="gemma3n",
        display_name="Gemma-3n",
        model_class="Gemma3nForConditionalGeneration",
        prompting=Prompting(
            audio_format=Gemma3nAudio(),
            llm_tokens_per_second=CLIP_TOKENS / MAX_SECONDS,
            tokens_per_clip=CLIP_TOKENS,
            long_audio="one clip is at most 30 s (its feature extractor truncates); every clip becomes 188 tokens",
            max_clip_seconds=MAX_SECONDS,
        ),
        tiny=Tiny(TINY, builder=build),
        structure=Structure(encoder_end_paths=("model.embed_audio",), layer_io=Gemma3nLayerIO()),
        loading=Loading(load_processor=processor_loader(AudioOnlyGemma3nProcessor)),
        notes=(
            "Pruning starts at or before the layers whose KV the last layers reuse; prompt plus answer must stay "
            "within the sliding window (512 tokens), on the dynamic cache (a static cache is refused)."
        ),
    )
)
