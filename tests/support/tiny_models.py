"""Tiny random models of every supported family, from the families' own tiny configs, and inputs.

A prompt is described per batch row as segments: ``("text", k)`` for k text tokens or
``("audio", n)`` for one clip of n audio tokens (of the family's fixed count where every clip has
the same, as in Gemma-3n: ``TinyModel.tokens``). ``TinyModel.inputs`` turns such rows into the
left-padded ``input_ids`` and the family's audio features (its ``AudioFormat``), sized so that the
audio encoder yields exactly n embeddings per clip.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from kvprune.models import ModelFamily, list_families, tiny

PAD = tiny.TEXT["pad_token_id"]
AUDIO = tiny.AUDIO_TOKEN
N_LAYERS = tiny.TEXT["num_hidden_layers"]
LARGE_INIT = dict(initializer_range=0.2)  # large weights give varied greedy tokens instead of one repeated id


def config_for_tests(family: ModelFamily):
    """The family's tiny config with large initial weights (top-level and text config)."""
    text = {"text_config": LARGE_INIT} if "text_config" in family.tiny.kwargs else {}
    return family.tiny_config(**LARGE_INIT, **text)


@dataclass
class TinyModel:
    family: ModelFamily

    def __post_init__(self):
        self.config = config_for_tests(self.family)  # what the audio arithmetic reads; models get a fresh copy
        self.audio = self.family.prompting.audio_format

    @property
    def name(self) -> str:
        return self.family.name

    def build(self, attn_implementation: str = "sdpa") -> nn.Module:
        torch.manual_seed(0)
        model = self.family.build(config_for_tests(self.family), attn_implementation=attn_implementation).eval()
        _spread_key_norms(model)
        return model

    def tokens(self, n: int) -> int:
        """The audio tokens of a clip asked to have n: n, or the family's fixed count per clip."""
        return self.audio.fixed_tokens(self.config) or n

    def placeholders(self, n: int) -> list[int]:
        return self.audio.placeholders(self.config, AUDIO, self.tokens(n))

    def audio_tokens(self, row) -> int:
        """Audio tokens of one row of segments."""
        return sum(self.tokens(n) for kind, n in row if kind == "audio")

    def feature_rows(self, n: int) -> int:
        """Rows on the features' batch axis that one clip of n audio tokens takes."""
        return len(self.audio.pieces(self.config, self.audio.frames_for(self.config, self.tokens(n))))

    def text_ids(self, rows, seed: int = 0) -> list[list[int]]:
        generator = torch.Generator().manual_seed(seed)
        out = []
        for row in rows:
            ids: list[int] = []
            for kind, n in row:
                ids += torch.randint(*tiny.TEXT_IDS, (n,), generator=generator).tolist() if kind == "text" else self.placeholders(n)
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
        clips = [self.audio.frames_for(self.config, self.tokens(n)) for row in rows for kind, n in row if kind == "audio"]
        generator = torch.Generator().manual_seed(seed + 1)
        features = self.audio.features(self.config, clips, generator) if clips else {}
        return dict(input_ids=input_ids, attention_mask=attention_mask, **features)


def _spread_key_norms(model: nn.Module) -> None:
    """Draw the scales of the keys' RMS norms (Qwen3-Omni, Gemma-3n) away from their initial ones:
    with unit scales every key has the same norm, and KNorm would choose among ties."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".k_norm." in name:
                parameter.copy_(torch.rand(parameter.shape, generator=generator) + 0.5)


#: the families whose classes the installed transformers has (older releases lack some)
FAMILIES = {family.name: TinyModel(family) for family in list_families() if family.available}
