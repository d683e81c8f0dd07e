"""Phi-4-multimodal's speech LoRA adapter: a tiny checkpoint laid out as the released one (the base
model, its processor, and the adapter in ``speech-lora/``), loaded by ``load_model``, active, and
pruned through."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import Phi4MultimodalFeatureExtractor, PreTrainedTokenizerFast

from kvprune import FastVPress
from kvprune.models import PHI4_MULTIMODAL, tiny
from kvprune.models.loading import ModelLoadError, load_model
from kvprune.models.phi4_multimodal import AudioOnlyPhi4Processor
from kvprune.keep_rules import keep_count
from tests.support.helpers import GREEDY

peft = pytest.importorskip("peft")

SPECIAL = ["<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>", "<|audio|>", "<|image|>", "<unk>"]
WORDS = "What is heard ?".split()
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{% for c in m['content'] %}{% if c['type'] == 'audio' %}<|audio|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
TARGETS = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]  # what the released speech-lora adapts


def phi4_processor() -> AudioOnlyPhi4Processor:
    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<|endoftext|>", eos_token="<|end|>",
        extra_special_tokens={"audio_token": "<|audio|>", "image_token": "<|image|>"},
    )
    return AudioOnlyPhi4Processor(
        audio_processor=Phi4MultimodalFeatureExtractor(feature_size=tiny.MELS), tokenizer=tokenizer, chat_template=TEMPLATE
    )


def _base_model(processor):
    tokenizer = processor.tokenizer
    config = PHI4_MULTIMODAL.tiny_config(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.pad_token_id, audio_config=dict(audio_token_id=tokenizer.audio_token_id),
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    return PHI4_MULTIMODAL.build(config).eval()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """Folder with the base model, its processor and a random speech LoRA in speech-lora/."""
    folder = tmp_path_factory.mktemp("phi4")
    processor = phi4_processor()
    base = _base_model(processor)
    base.save_pretrained(folder)
    processor.save_pretrained(folder)
    adapted = peft.get_peft_model(_base_model(processor), peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS))
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:  # peft starts B at zero (no change); a trained adapter is not
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
    adapted.save_pretrained(folder / "speech-lora")
    return folder


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return load_model(checkpoint, device="cpu", dtype="float32")


def _merged(loaded) -> torch.nn.Module:
    """The base model with each adapted projection's weight replaced by W + scale * B @ A, by hand."""
    merged = _base_model(loaded.processor)
    modules = dict(loaded.model.named_modules())
    with torch.no_grad():
        for name, module in merged.named_modules():
            lora = modules.get(name)
            if lora is not None and hasattr(lora, "lora_A"):
                a, b = lora.lora_A["speech"].weight, lora.lora_B["speech"].weight
                module.weight += lora.scaling["speech"] * b @ a
    return merged


def _inputs(loaded, seconds=(2.0,)):
    waves = [0.1 * np.random.default_rng(i).standard_normal(int(s * 16_000)).astype(np.float32) for i, s in enumerate(seconds)]
    return loaded.build_inputs(waves, "What is heard ?")


def test_the_speech_adapter_is_loaded_active_and_wraps_the_decoder_projections(loaded):
    assert loaded.adapters == ("speech",)
    for layer in PHI4_MULTIMODAL.layers(loaded.model):
        for projection in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj):
            assert type(projection).__module__.startswith("peft") and projection.active_adapters == ["speech"]
    inputs = _inputs(loaded)
    with torch.no_grad():
        logits = loaded.model(**inputs).logits
        merged = _merged(loaded)(**inputs).logits
        base = _base_model(loaded.processor)(**inputs).logits
    torch.testing.assert_close(logits, merged, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(logits, base, atol=1e-3), "the adapter changes the outputs"


def test_pruning_with_the_adapter_active_equals_pruning_the_merged_model(loaded):
    inputs = _inputs(loaded)
    merged = _merged(loaded)
    press = FastVPress(layer=2)
    with torch.no_grad():
        reference = loaded.model.generate(**inputs, max_new_tokens=4, **GREEDY)
        with press(loaded.model, ratio=0.0):
            assert torch.equal(loaded.model.generate(**inputs, max_new_tokens=4, **GREEDY), reference)
        with press(loaded.model, ratio=0.5) as outcome:
            pruned = loaded.model(**inputs).logits
        with press(merged, ratio=0.5) as merged_outcome:
            expected = merged(**inputs).logits
    assert torch.equal(outcome.kept_positions[0], merged_outcome.kept_positions[0])
    assert outcome.stats[0].kept_tokens == keep_count(outcome.stats[0].audio_tokens, 0.5) < outcome.stats[0].audio_tokens
    torch.testing.assert_close(pruned, expected, rtol=1e-4, atol=1e-4)


def test_a_checkpoint_without_an_adapter_loads_without_one(tmp_path):
    processor = phi4_processor()
    _base_model(processor).save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    loaded = load_model(tmp_path, device="cpu")
    assert loaded.adapters == () and not hasattr(PHI4_MULTIMODAL.layers(loaded.model)[0].self_attn.qkv_proj, "lora_A")


def test_without_peft_loading_says_what_to_install(checkpoint, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft now raises ImportError
    with pytest.raises(ModelLoadError, match=r"speech-lora/.*kvprune\[lora\]"):
        load_model(checkpoint, device="cpu")
