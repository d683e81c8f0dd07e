"""Every family's real processor class, built offline on tiny word-level tokenizers (Voxtral: a tiny
tekken file for mistral-common) and real feature extractors with the tiny models' mel bins, and a
tiny model whose config agrees with it (placeholder ids, chunk lengths, projector windows).

Two processors cannot be the stock ones here, and the substitutes say what they change:
Aero-1's is remote code, so ``AeroLikeProcessor`` re-implements its published behaviour; Granite
Speech's feature extractor needs torchaudio (no build for this torch), so ``GraniteMelsWithoutTorchaudio``
computes the same mel frames with torch (its token arithmetic and the processor are the stock ones).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import (
    AudioFlamingo3Processor, Gemma3nAudioFeatureExtractor, GraniteSpeechFeatureExtractor, GraniteSpeechProcessor,
    Phi4MultimodalFeatureExtractor, PreTrainedTokenizerFast, Qwen2AudioProcessor, VoxtralProcessor, WhisperFeatureExtractor,
)
from transformers.audio_utils import mel_filter_bank
from transformers.feature_extraction_utils import BatchFeature

from kvprune.models import FAMILIES, tiny
from kvprune.models.gemma3n import AudioOnlyGemma3nProcessor
from kvprune.models.phi4_multimodal import AudioOnlyPhi4Processor
from kvprune.models.qwen2_5_omni import AudioOnlyOmniProcessor
from kvprune.models.qwen3_omni import AudioOnlyQwen3OmniProcessor
from kvprune.models.vision_frames import add_pil_vision

MELS = tiny.MELS
WORDS = "system user assistant You are a helpful . Audio 1 2 3 : What is heard ? A B C D".split()


def word_tokenizer(specials: dict[int, str], roles: dict[str, str] | None = None, **named) -> PreTrainedTokenizerFast:
    """A word-level tokenizer: ``specials`` at the given ids (the tiny configs' placeholder ids),
    ordinary words from id 10; ``roles`` names special tokens (``audio_token`` -> its text)."""
    vocab = {word: 10 + i for i, word in enumerate(WORDS)}
    vocab.update({token: i for i, token in specials.items()})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation()])
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials.values()])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token=specials[0], eos_token=specials[2],
        extra_special_tokens=roles or {}, **named,
    )


def chat_template(audio: str, image: str = "", video: str = "") -> str:
    """A ChatML template that writes ``audio`` for every audio item of a message (and ``image``,
    ``video`` for those items, as the Omni templates do); a system turn may be plain text."""
    return (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
        "{% else %}{% for c in m['content'] %}"
        "{% if c['type'] in ('audio', 'audio_url') %}" + audio + "{% elif c['type'] == 'image' %}" + image +
        "{% elif c['type'] == 'video' %}" + video + "{% else %}{{ c['text'] }}{% endif %}"
        "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


BASE = {0: "<pad>", 1: "<s>", 2: "<|im_end|>", 3: "<|im_start|>", 4: "<unk>"}
OMNI = {
    **BASE, tiny.AUDIO_TOKEN: "<|AUDIO|>", tiny.AUDIO_START: "<|audio_bos|>", tiny.AUDIO_END: "<|audio_eos|>",
    tiny.IMAGE_TOKEN: "<|IMAGE|>", tiny.VIDEO_TOKEN: "<|VIDEO|>", tiny.VISION_START: "<|vision_bos|>", 106: "<|vision_eos|>",
}
OMNI_ROLES = dict(
    audio_token="<|AUDIO|>", audio_bos_token="<|audio_bos|>", audio_eos_token="<|audio_eos|>", image_token="<|IMAGE|>",
    video_token="<|VIDEO|>", vision_bos_token="<|vision_bos|>", vision_eos_token="<|vision_eos|>",
)


#: frame area bounds of the tiny Omni processors' videos (the checkpoints' are 128 to 768 patches of 28 x 28)
TINY_VIDEO_SIZE = {"shortest_edge": 28 * 28, "longest_edge": 4 * 28 * 28}


def _omni(processor_class, chunk_seconds: int, config):
    """An Omni processor as ``load_model`` builds one without torchvision: the stock class on its
    feature extractor and tokenizer, images and video through ``vision_frames`` (small frames, the
    tiny vision tower's patch size)."""
    tokenizer = word_tokenizer(OMNI, OMNI_ROLES)
    extractor = WhisperFeatureExtractor(feature_size=MELS, chunk_length=chunk_seconds)
    template = chat_template("<|audio_bos|><|AUDIO|><|audio_eos|>", "<|vision_bos|><|IMAGE|><|vision_eos|>",
                             "<|vision_bos|><|VIDEO|><|vision_eos|>")
    processor = add_pil_vision(processor_class(extractor, tokenizer, chat_template=template),
                               patch_size=config.vision_config.patch_size, size=TINY_VIDEO_SIZE)
    processor.videos_kwargs = {"size": TINY_VIDEO_SIZE}  # instead of the class's 128 to 768 patches
    return processor


class AeroLikeProcessor:
    """Aero-1-Audio's remote-code processor as its published source behaves: Qwen2-Audio's Whisper
    feature extractor padded to 30 s (``padding="max_length"``), features renamed ``audio_values``
    with an ``audio_attention_mask``, and each ``<|AUDIO|>`` expanded to the Whisper count of its
    frames, ((frames - 1) // 2 + 1 - 2) // 2 + 1."""

    def __init__(self, tokenizer, feature_extractor):
        self.tokenizer, self.feature_extractor = tokenizer, feature_extractor
        self.audio_token = "<|AUDIO|>"

    def apply_chat_template(self, conversation, **kwargs):
        return self.tokenizer.apply_chat_template(conversation, chat_template=chat_template(self.audio_token), **kwargs)

    def batch_decode(self, ids, **kwargs):
        """Its tokenizer's, as every ``ProcessorMixin`` has it (the remote class is one)."""
        return self.tokenizer.batch_decode(ids, **kwargs)

    def __call__(self, text, audios=None, sampling_rate=16_000, **kwargs):
        if not audios:  # text alone
            return dict(self.tokenizer(text, return_tensors="pt"))
        features = self.feature_extractor(
            audios, sampling_rate=sampling_rate, return_attention_mask=True, padding="max_length", return_tensors="pt"
        )
        frames = features["attention_mask"].sum(-1)
        counts = (((frames - 1) // 2 + 1) - 2) // 2 + 1
        for count in counts.tolist():  # one audio item after the other, in order
            text = text.replace(self.audio_token, "<placeholder>" * count, 1)
        ids = self.tokenizer(text.replace("<placeholder>", self.audio_token), return_tensors="pt")
        return dict(ids, audio_values=features["input_features"], audio_attention_mask=features["attention_mask"])


class GraniteMelsWithoutTorchaudio(GraniteSpeechFeatureExtractor):
    """Granite Speech's feature extractor with its torchaudio mel spectrogram (center=True, Hann
    window, HTK mel scale, power 2) computed by torch: same frame count, stacking and token count."""

    def __init__(self, **kwargs):
        super(GraniteSpeechFeatureExtractor, self).__init__(feature_size=kwargs.get("n_mels", 80), sampling_rate=16000, padding_value=0.0)
        self.melspec_kwargs = dict(sample_rate=16000, n_fft=512, win_length=400, hop_length=160, n_mels=kwargs.get("n_mels", 80))
        self.projector_window_size = kwargs.get("projector_window_size", 15)
        self.projector_downsample_rate = kwargs.get("projector_downsample_rate", 5)
        self.mel_filters = torch.tensor(
            mel_filter_bank(257, self.melspec_kwargs["n_mels"], 0.0, 8000.0, 16000, mel_scale="htk"), dtype=torch.float32
        )

    def __call__(self, audios, device="cpu"):
        """The stock __call__ without its torchaudio check; the counts are the stock methods'."""
        batched, lengths = self._get_audios_and_audio_lengths(audios)
        sizes = self._get_num_audio_features(lengths)
        mask = torch.arange(max(sizes))[None] < torch.tensor(sizes)[:, None]
        return BatchFeature(dict(input_features=self._extract_mel_spectrograms(batched), audio_embed_sizes=sizes, input_features_mask=mask))

    def _extract_mel_spectrograms(self, audio, device="cpu"):
        window = torch.hann_window(400)
        spectrum = torch.stft(audio.float(), 512, 160, 400, window, center=True, return_complex=True).abs() ** 2
        mel = (self.mel_filters.T @ spectrum).transpose(-1, -2).clip_(min=1e-10).log10_()
        mel = torch.maximum(mel, mel.amax(dim=(-2, -1), keepdim=True) - 8.0).div_(4).add_(1)
        if mel.shape[1] % 2 == 1:
            mel = mel[:, :-1]
        return mel.reshape(audio.shape[0], -1, 2 * mel.shape[-1])


def tekken_file(folder: Path) -> Path:
    """A tiny tekken tokenizer for mistral-common: the 256 byte tokens, Voxtral's special tokens at
    their ids ([AUDIO] 24, [BEGIN_AUDIO] 25), and its audio settings (12.5 tokens/s, 30 s chunks)."""
    names = {
        0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]", 5: "[AVAILABLE_TOOLS]", 6: "[/AVAILABLE_TOOLS]",
        7: "[TOOL_RESULTS]", 8: "[/TOOL_RESULTS]", 9: "[TOOL_CALLS]", 10: "[IMG]", 11: "<pad>", 12: "[IMG_BREAK]",
        13: "[IMG_END]", 14: "[PREFIX]", 15: "[MIDDLE]", 16: "[SUFFIX]", 17: "[SYSTEM_PROMPT]", 18: "[/SYSTEM_PROMPT]",
        19: "[TOOL_CONTENT]", 20: "[ARGS]", 21: "[CALL_ID]", 24: "[AUDIO]", 25: "[BEGIN_AUDIO]", 34: "[TRANSCRIBE]",
        35: "[THINK]", 36: "[/THINK]",
    }
    n_special = 40
    data = {
        "config": {
            "pattern": r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            "num_vocab_tokens": 256, "default_vocab_size": 256 + n_special, "default_num_special_tokens": n_special,
            "version": "v11",
        },
        "vocab": [{"rank": i, "token_bytes": base64.b64encode(bytes([i])).decode(), "token_str": None} for i in range(256)],
        "special_tokens": [
            {"rank": i, "token_str": names.get(i, f"<SPECIAL_{i}>"), "is_control": True} for i in range(n_special)
        ],
        "audio": {
            "sampling_rate": 16000, "frame_rate": 12.5, "chunk_length_s": 30.0,
            "audio_encoding_config": {"num_mel_bins": MELS, "hop_length": 160, "window_size": 400},
        },
    }
    path = folder / "tekken.json"
    path.write_text(json.dumps(data))
    return path


def _voxtral(folder: Path):
    from transformers.tokenization_mistral_common import MistralCommonBackend

    tokenizer = MistralCommonBackend(tokenizer_path=str(tekken_file(folder)))
    return VoxtralProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=MELS), tokenizer=tokenizer)


GEMMA = {
    **BASE, tiny.AUDIO_TOKEN: "<audio_soft_token>", tiny.AUDIO_START: "<start_of_audio>", tiny.AUDIO_END: "<end_of_audio>",
    tiny.IMAGE_TOKEN: "<image_soft_token>", 105: "<start_of_image>", 106: "<end_of_image>",
}


def processor_and_config(name: str, folder: Path):
    """The family's real processor (or the substitute named above) and the tiny config that agrees with it."""
    family = FAMILIES.get(name)
    if name == "qwen2_5_omni":
        return _omni(AudioOnlyOmniProcessor, 300, family.tiny_config()), family.tiny_config()
    if name == "qwen3_omni":
        return _omni(AudioOnlyQwen3OmniProcessor, 30, family.tiny_config()), family.tiny_config()
    if name in ("qwen2_audio", "aero"):
        tokenizer = word_tokenizer(OMNI, OMNI_ROLES)
        extractor = WhisperFeatureExtractor(feature_size=MELS)
        whisper = dict(audio_config=dict(max_source_positions=1500))  # the extractor's 30 s of 3000 frames
        if name == "aero":
            return AeroLikeProcessor(tokenizer, extractor), family.tiny_config(**whisper)
        return Qwen2AudioProcessor(feature_extractor=extractor, tokenizer=tokenizer), family.tiny_config(**whisper)
    if name == "audioflamingo3":
        tokenizer = word_tokenizer({**BASE, tiny.AUDIO_TOKEN: "<sound>"})
        processor = AudioFlamingo3Processor(WhisperFeatureExtractor(feature_size=MELS), tokenizer, chat_template=chat_template("<sound>"))
        return processor, family.tiny_config(audio_config=dict(max_source_positions=1500))
    if name == "phi4_multimodal":
        tokenizer = word_tokenizer({**BASE, tiny.AUDIO_TOKEN: "<|audio|>", tiny.IMAGE_TOKEN: "<|image|>"},
                                   dict(audio_token="<|audio|>", image_token="<|image|>"))
        extractor = Phi4MultimodalFeatureExtractor(feature_size=MELS)
        return AudioOnlyPhi4Processor(extractor, tokenizer, chat_template=chat_template("<|audio|>")), family.tiny_config()
    if name == "granite_speech":
        tokenizer = word_tokenizer({**BASE, tiny.AUDIO_TOKEN: "<|audio|>"}, dict(audio_token="<|audio|>"))
        config = family.tiny_config()
        extractor = GraniteMelsWithoutTorchaudio(
            n_mels=MELS, projector_window_size=config.window_size, projector_downsample_rate=config.downsample_rate
        )
        return GraniteSpeechProcessor(extractor, tokenizer, chat_template=chat_template("<|audio|>")), config
    if name == "gemma3n":
        tokenizer = word_tokenizer(GEMMA, dict(
            audio_token="<audio_soft_token>", boa_token="<start_of_audio>", eoa_token="<end_of_audio>",
            image_token="<image_soft_token>", boi_token="<start_of_image>", eoi_token="<end_of_image>",
        ))
        extractor = Gemma3nAudioFeatureExtractor(feature_size=MELS)
        processor = AudioOnlyGemma3nProcessor(extractor, tokenizer, chat_template=chat_template("<audio_soft_token>"))
        return processor, family.tiny_config(audio_soft_tokens_per_image=processor.audio_seq_length)
    if name == "voxtral":
        return _voxtral(folder), family.tiny_config(audio_config=dict(max_source_positions=1500), audio_token_id=24,
                                                    text_config=dict(vocab_size=296))
    raise KeyError(
        f"no offline processor for family {name!r}: add one to processor_and_config (tests/support/tiny_processors.py), "
        "so that the placeholders its real processor writes are checked against its encoder and its audio format"
    )


def wave(seconds: float, seed: int = 0) -> np.ndarray:
    return (0.1 * np.random.default_rng(seed).standard_normal(int(seconds * 16_000))).astype(np.float32)

