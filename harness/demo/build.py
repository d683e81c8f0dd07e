"""The demo model, tokenizer and processor, built in code: a tiny Qwen2.5-Omni thinker.

The architecture is the stock ``Qwen2_5OmniThinkerForConditionalGeneration`` (Whisper-style audio
encoder windowed over 2 s, 25 audio tokens per second, mrope decoder), so pruning runs the real
code path; only the sizes are small. The tokenizer is word level over the words of the synthetic
suite's prompts plus the Qwen special tokens the processor needs.
"""

from __future__ import annotations

import torch
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen2_5OmniThinkerConfig,
    Qwen2_5OmniThinkerForConditionalGeneration,
    WhisperFeatureExtractor,
)
from transformers.utils import is_torchvision_available

from .synthetic import CHOICES, INSTRUCTIONS, LETTERS, QUESTIONS
from kvprune.models.qwen2_5_omni import QWEN2_5_OMNI, AudioOnlyOmniProcessor

N_MELS = 32
HIDDEN = 128
DECODER_LAYERS = 4

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
NAMED_TOKENS = {  # attribute name on the tokenizer -> token, as Qwen2.5-Omni's tokenizer has them
    "audio_token": "<|AUDIO|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
    "image_token": "<|IMAGE|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
}
UNK = "<unk>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END, *NAMED_TOKENS.values(), UNK]

# Qwen's layout: one turn per message, audio items become <|audio_bos|><|AUDIO|><|audio_eos|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'audio' %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _pre_tokenizer():
    return pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation()])


def vocabulary() -> list[str]:
    """Every word and punctuation mark of the suite's prompts and the chat roles, sorted."""
    texts = [*QUESTIONS.values(), *(c for choices in CHOICES.values() for c in choices), *INSTRUCTIONS]
    texts += ["system user assistant", " ".join(LETTERS)]
    split = _pre_tokenizer()
    return sorted({word for text in texts for word, _ in split.pre_tokenize_str(text)})


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + vocabulary())}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = _pre_tokenizer()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token=UNK, pad_token=PAD, eos_token=IM_END,
        padding_side="left", extra_special_tokens=dict(NAMED_TOKENS),
    )


def build_processor(tokenizer: PreTrainedTokenizerFast | None = None):
    """Qwen2.5-Omni's processor with a 32-mel Whisper feature extractor (100 frames per second).

    Where torchvision is installed this is the standard ``Qwen2_5OmniProcessor`` with default
    image and video processors, so its saved files load like any Qwen2.5-Omni checkpoint's."""
    tokenizer = tokenizer or build_tokenizer()
    features = WhisperFeatureExtractor(feature_size=N_MELS, sampling_rate=16_000, chunk_length=30)
    if not is_torchvision_available():
        return AudioOnlyOmniProcessor(feature_extractor=features, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    from transformers import Qwen2_5OmniProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    return Qwen2_5OmniProcessor(
        image_processor=Qwen2VLImageProcessor(), video_processor=Qwen2VLVideoProcessor(),
        feature_extractor=features, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE,
    )


def build_config(tokenizer: PreTrainedTokenizerFast) -> Qwen2_5OmniThinkerConfig:
    """Qwen2.5-Omni's tiny config, wider and with the demo tokenizer's vocabulary and special ids."""
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    return QWEN2_5_OMNI.tiny_config(
        audio_config=dict(
            num_mel_bins=N_MELS, d_model=128, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=256,
            output_dim=HIDDEN, n_window=100,
        ),
        vision_config=dict(hidden_size=16, intermediate_size=16, num_heads=1, out_hidden_size=HIDDEN),
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=384, num_hidden_layers=DECODER_LAYERS,
            max_position_embeddings=2048,
            rope_parameters=dict(mrope_section=[4, 6, 6]),  # sums to head_dim / 2 = 16
            pad_token_id=ids[PAD], eos_token_id=ids[IM_END], bos_token_id=None,
        ),
        audio_token_index=ids[NAMED_TOKENS["audio_token"]],
        audio_start_token_id=ids[NAMED_TOKENS["audio_bos_token"]],
        audio_end_token_id=ids[NAMED_TOKENS["audio_eos_token"]],
        image_token_index=ids[NAMED_TOKENS["image_token"]],
        video_token_index=ids[NAMED_TOKENS["video_token"]],
        vision_start_token_id=ids[NAMED_TOKENS["vision_bos_token"]],  # read by the rope index even for audio
        vision_end_token_id=ids[NAMED_TOKENS["vision_eos_token"]],
        user_token_id=tokenizer.convert_tokens_to_ids("user"),
        pad_token_id=ids[PAD],
        eos_token_id=ids[IM_END],
    )


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> Qwen2_5OmniThinkerForConditionalGeneration:
    """Freshly initialized (seeded) demo model; greedy generation stops at ``<|im_end|>``.

    The audio convolutions get He initialization: with the 0.02 default (made for fine-tuning
    pretrained weights) their output is ~100x smaller than the encoder's sinusoidal positions, so
    clips start out nearly indistinguishable and training from scratch stalls."""
    torch.manual_seed(seed)
    model = Qwen2_5OmniThinkerForConditionalGeneration(build_config(tokenizer))
    audio_tower, _ = QWEN2_5_OMNI.audio_encoder(model)
    for conv in (audio_tower.conv1, audio_tower.conv2):
        torch.nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
        torch.nn.init.zeros_(conv.bias)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END), pad_token_id=tokenizer.pad_token_id,
        do_sample=False, max_new_tokens=4,
    )
    return model
