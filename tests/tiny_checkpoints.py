"""A tiny Qwen2-Audio checkpoint on disk with its real processor class (a word-level tokenizer and
a Whisper feature extractor with the tiny mel count), as ``save_pretrained`` writes it: what loading
by folder and building prompts the way the family's processor does are tested on."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2AudioProcessor, WhisperFeatureExtractor

from kvprune.models import QWEN2_AUDIO, tiny

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<unk>"]
WORDS = "system user assistant You are a helpful . Audio 1 2 : What is heard ? A B C D".split()
MELS = tiny.MELS


def word_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIAL + sorted(set(WORDS)))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation()])
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<|endoftext|>", eos_token="<|im_end|>")


def qwen2_audio_checkpoint(folder: Path) -> Path:
    """Write the tiny checkpoint and its processor to ``folder``; its encoder takes the processor's
    30 s chunks of 3000 frames."""
    tokenizer = word_tokenizer()
    processor = Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=MELS), tokenizer=tokenizer)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL}
    config = QWEN2_AUDIO.tiny_config(
        audio_config=dict(max_source_positions=1500),  # the processor's 30 s chunks of 3000 frames
        text_config=dict(vocab_size=len(tokenizer), pad_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"]),
        audio_token_index=ids["<|AUDIO|>"],
    )
    torch.manual_seed(0)
    QWEN2_AUDIO.build(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
