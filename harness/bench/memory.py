"""Whether a bench preset fits the device, worked out before anything is built.

A 7B preset on a CPU used to be killed by the kernel after a minute and a half, with no message.
``check_fits`` refuses it up front with an estimate of what it needs: the weights (the model built on
the meta device, where nothing is allocated, counted in the bench dtype), the KV cache of the longest
prompt, and the prefill's transient activations (hidden states, MLP intermediates, one layer's keys
and values and the audio encoder's output), with a 20% margin for the allocator and the framework.
It is an estimate, not a measurement: a preset close to the limit may still fail, as a row.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil
import torch

from ..setup.options import ENGINE_CACHE
from .presets import PRESETS, TEXT_AFTER, TEXT_BEFORE, Preset

GIB = 2**30
MARGIN = 1.2


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one preset needs at one audio length."""

    weights: int
    kv_cache: int
    activations: int

    @property
    def total(self) -> int:
        return int(MARGIN * (self.weights + self.kv_cache + self.activations))

    def describe(self) -> str:
        return (f"about {self.total / GIB:.1f} GiB: weights {self.weights / GIB:.1f}, KV cache {self.kv_cache / GIB:.1f}, "
                f"activations {self.activations / GIB:.1f}, plus {MARGIN - 1:.0%}")


def estimate(preset: Preset, seconds: float, dtype: torch.dtype, decode_tokens: int = 0, batch: int = 1,
             prefilled: int | None = None) -> MemoryEstimate:
    """What ``preset`` needs for ``batch`` rows of ``seconds`` of audio in ``dtype``, ``prefilled`` of them at once
    (default: all; the engine prefills a batch's one prompt once and copies its cache into every row)."""
    with torch.device("meta"):
        model = preset.family.build(preset.config(), dtype=dtype)
    size = torch.tensor([], dtype=dtype).element_size()
    weights = sum(p.numel() for p in model.parameters()) * size
    config, audio = model.config, preset.family.prompting.audio_format
    audio_tokens = audio.tokens(config, audio.frames(config, seconds))
    row = TEXT_BEFORE + TEXT_AFTER + len(audio.placeholders(config, 0, audio_tokens)) + decode_tokens  # markers too
    tokens, prefill_tokens = batch * row, (batch if prefilled is None else prefilled) * row
    text = preset.family.decoder(model).config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    per_token_layer = 2 * text.num_key_value_heads * head_dim * size  # keys and values
    kv_cache = text.num_hidden_layers * tokens * per_token_layer
    activations = prefill_tokens * size * (4 * text.hidden_size + 3 * text.intermediate_size + text.vocab_size // 8) \
        + prefill_tokens * per_token_layer
    return MemoryEstimate(weights, kv_cache, activations)


def available_bytes(device: torch.device) -> int | None:
    """Memory free for the bench on ``device`` now (None: unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        return psutil.virtual_memory().available
    return None


def check_fits(config, device: torch.device, dtype: torch.dtype, cache: str = ENGINE_CACHE) -> None:
    """Refuse a bench whose largest preset x audio length cannot fit ``device`` at its smallest batch size,
    naming the estimate (larger batches that do not fit are the batch mode's own finding, recorded as rows).
    ``cache``: the decoding path; on the engine a batch prefills one prompt, elsewhere all its rows at once."""
    available = available_bytes(device)
    if available is None:
        return
    longest = max(config.audio_seconds)
    batch = min(config.batch_sizes or [1])
    for name in config.presets:
        try:
            needed = estimate(PRESETS.get(name), longest, dtype, config.decode_tokens, batch,
                              prefilled=1 if cache == ENGINE_CACHE else batch)
        except Exception:  # a preset that cannot even be laid out fails when it is built, as a row
            continue
        if needed.total > available:
            prompts = f" x {batch} rows" if batch > 1 else ""
            raise ValueError(
                f"preset {name} at {longest:g} s of audio{prompts} needs {needed.describe()} ({dtype}), but {device} has "
                f"{available / GIB:.1f} GiB free: it would not fit (on a CPU the system would kill it). Run it on a "
                "GPU with enough memory (--device cuda), or take a smaller preset (tiny-* run on a CPU) or shorter "
                "--audio-seconds."
            )
