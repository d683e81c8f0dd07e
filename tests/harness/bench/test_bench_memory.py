"""``kvprune bench`` refuses a preset that cannot fit the device before building it, with an estimate
of what it needs; the estimate's weights and KV cache are what a built model really holds."""

from __future__ import annotations

import pytest
import torch

from kvprune.harness.bench import memory
from kvprune.harness.bench.config import BenchConfig
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.cli import main
from kvprune.generation.timing import kv_cache_bytes
from kvprune.harness.setup.options import ENGINE_CACHE

GIB = 2**30


@pytest.mark.parametrize("name", ["tiny-omni", "tiny-voxtral", "tiny-phi4"])
def test_the_estimate_counts_the_weights_and_the_kv_cache_a_model_really_holds(name):
    preset = PRESETS.get(name)
    model = preset.build(torch.device("cpu"), torch.float32, "sdpa")
    prompt = preset.prompt(model, 2.0, decode_tokens=1)
    with torch.no_grad():
        cache = model(**prompt.inputs, use_cache=True).past_key_values
    estimated = memory.estimate(preset, 2.0, torch.float32)
    assert estimated.weights == sum(p.numel() * p.element_size() for p in model.parameters())
    assert estimated.kv_cache == kv_cache_bytes(cache)
    assert estimated.activations > 0 and estimated.total > estimated.weights + estimated.kv_cache


def test_a_preset_that_cannot_fit_is_refused_up_front_with_its_estimate(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 8 * GIB)
    out = tmp_path / "bench"
    assert main(["bench", "--preset", "qwen2.5-omni-7b", "--device", "cpu", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "request" not in error, "no empty progress bar before the refusal"
    needed = memory.estimate(PRESETS.get("qwen2.5-omni-7b"), 300.0, torch.float32, decode_tokens=32)
    assert f"preset qwen2.5-omni-7b at 300 s of audio needs about {needed.total / GIB:.1f} GiB" in error
    assert "cpu has 8.0 GiB free" in error and "--device cuda" in error
    assert needed.weights > 30 * GIB, "8.9 B parameters (thinker, audio and vision encoders) in float32"
    assert not out.exists(), "refused before anything was built or written"
    config = BenchConfig(presets=["tiny-omni"], audio_seconds=[2.0], out=None, progress=False, device="cpu")
    memory.check_fits(config, torch.device("cpu"), torch.float32)  # a tiny preset fits


def test_the_batch_mode_is_refused_only_when_its_smallest_batch_cannot_fit(monkeypatch):
    """Off the engine a batch prefills all its rows at once; on it, one prompt whose cache every row copies, so that
    only the KV cache grows with the rows (``--batch-sizes 64`` of the 7B at 300 s was refused on an 80 GB GPU for
    83 GiB of activations it never allocates)."""
    preset = PRESETS.get("tiny-omni")
    one, four = (memory.estimate(preset, 2.0, torch.float32, decode_tokens=32, batch=b) for b in (1, 4))
    assert four.weights == one.weights and four.kv_cache == 4 * one.kv_cache and four.activations == 4 * one.activations
    engine = memory.estimate(preset, 2.0, torch.float32, decode_tokens=32, batch=4, prefilled=1)
    assert engine.kv_cache == four.kv_cache and engine.activations == one.activations
    monkeypatch.setattr(memory, "available_bytes", lambda device: (engine.total + four.total) // 2)
    config = BenchConfig(presets=["tiny-omni"], audio_seconds=[2.0], out=None, progress=False, device="cpu")
    memory.check_fits(config, torch.device("cpu"), torch.float32, "static")  # batch 1 fits
    config = BenchConfig(presets=["tiny-omni"], audio_seconds=[2.0], out=None, progress=False, device="cpu", batch_sizes=[16, 4])
    memory.check_fits(config, torch.device("cpu"), torch.float32, ENGINE_CACHE)  # 4 rows of one prefill fit
    with pytest.raises(ValueError, match="preset tiny-omni at 2 s of audio x 4 rows needs"):
        memory.check_fits(config, torch.device("cpu"), torch.float32, "static")  # 4 prefills do not
