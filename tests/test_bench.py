"""``kvprune bench`` end to end on CPU: tiny models of every family, seconds of audio, one repeat.
What is checked is the bookkeeping (rows, columns, token and cache counts, files), never timings."""

from __future__ import annotations

import re
from dataclasses import replace

import pandas as pd
import pytest
import torch
from kvprune.harness.bench import presets as bench_presets
from kvprune.harness.bench.config import BenchConfig, run_bench
from kvprune.harness.cli import main
from kvprune.harness.bench.report import COLUMNS
from matplotlib.image import imread

from kvprune import DARTPress, FastVPress
from kvprune.ratios import keep_count
from kvprune.models import list_families

PRESETS = [family.tiny_preset for family in list_families() if family.available]
SECONDS = [1.0, 2.5]
METHODS = ["fastv", "random", "frame", "dart"]
RATIOS = [0.0, 0.5]
K = 2
FAST = dict(decode_tokens=2, repeats=1, warmup=0, device="cpu", progress=False, layer=K)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    config = BenchConfig(
        presets=PRESETS, audio_seconds=SECONDS, methods=METHODS, ratios=RATIOS, out=out, command="pytest", **FAST
    )
    return run_bench(config), out


def _groups(frame):
    return frame.groupby(["preset", "audio_seconds"])


def test_a_row_per_run_and_no_error(bench):
    frame, _ = bench
    assert list(frame.columns) == COLUMNS
    assert frame["error"].isna().all(), frame["error"].dropna().tolist()
    per_length = 1 + len(RATIOS) + len(METHODS) * len(RATIOS)  # unpruned, ideal per ratio, presses
    assert len(frame) == len(PRESETS) * len(SECONDS) * per_length
    measured = frame[frame["method"] != "ideal"]
    for column in ("prefill_ms", "encoder_ms", "decode_ms_per_token", "kv_bytes"):
        assert (measured[column] > 0).all(), column
    assert (frame[frame["method"].isin(["fastv", "dart"])]["score_ms"] > 0).all()


def test_csv_holds_every_column_and_the_run_details(bench):
    frame, out = bench
    csv = pd.read_csv(out / "bench.csv")
    assert list(csv.columns) == COLUMNS
    assert len(csv) == len(frame)
    assert set(csv["command"]) == {"pytest"}
    assert set(csv["torch"]) == {torch.__version__}
    assert set(csv["card"]).isdisjoint({None, ""})


def test_unpruned_and_ratio_zero_rows(bench):
    frame, _ = bench
    for _, rows in _groups(frame):
        unpruned = rows[rows["method"] == "none"]
        assert len(unpruned) == 1 and unpruned["ratio"].iloc[0] == 0.0
        assert unpruned["kept_tokens"].iloc[0] == unpruned["audio_tokens"].iloc[0]
        assert unpruned["prefill_vs_unpruned"].iloc[0] == 1.0
        at_zero = rows[(rows["method"].isin(METHODS)) & (rows["ratio"] == 0.0)]
        assert sorted(at_zero["method"]) == sorted(METHODS)
        assert (at_zero["kept_tokens"] == at_zero["audio_tokens"]).all()
        assert (at_zero["kv_bytes"] == unpruned["kv_bytes"].iloc[0]).all()


def _sharing_layers(preset_name: str) -> int:
    """Layers that attend to another layer's cache and hold none (Gemma-3n's last layers)."""
    preset = bench_presets.PRESETS.get(preset_name)
    return len(preset.family.layer_io.kv_sources(preset.config().get_text_config()))


def test_pruned_cache_loses_the_removed_tokens_in_layers_from_k(bench):
    frame, _ = bench
    for (preset, seconds), rows in _groups(frame):
        unpruned = rows[rows["method"] == "none"].iloc[0]
        caching = unpruned["llm_layers"] - _sharing_layers(preset)  # layers with a cache of their own
        per_token_layer = unpruned["kv_bytes"] / (caching * unpruned["seq_len"])
        for _, row in rows[(rows["method"].isin(METHODS)) & (rows["ratio"] == 0.5)].iterrows():
            removed = row["audio_tokens"] - row["kept_tokens"]
            assert row["kept_tokens"] == keep_count(int(row["audio_tokens"]), 0.5), (preset, row["method"])
            expected = unpruned["kv_bytes"] - (caching - K) * removed * per_token_layer
            assert row["kv_bytes"] == expected, (preset, seconds, row["method"])


def test_ideal_rows_replace_the_layers_from_k(bench):
    frame, _ = bench
    for _, rows in _groups(frame):
        unpruned = rows[rows["method"] == "none"].iloc[0]
        ideal = rows[rows["method"] == "ideal"].set_index("ratio")
        assert list(ideal.index) == RATIOS
        assert ideal.loc[0.0, "prefill_ms"] == unpruned["prefill_ms"]
        expected = unpruned["prefill_ms"] - unpruned["tail_layers_ms"] + ideal.loc[0.5, "tail_layers_ms"]
        assert ideal.loc[0.5, "prefill_ms"] == pytest.approx(expected)
        pressed = rows[(rows["method"] == "fastv") & (rows["ratio"] == 0.5)].iloc[0]
        assert pressed["ideal_ms"] == ideal.loc[0.5, "prefill_ms"]


def test_markdown_and_figure_are_written(bench):
    _, out = bench
    text = (out / "bench.md").read_text()
    assert "| method | ratio | audio tokens | kept tokens | prefill ms | vs unpruned | vs ideal |" in text
    assert "command: `pytest`" in text
    for preset in PRESETS:
        assert f"## {preset}: 2.5 s of audio" in text
    image = imread(out / "prefill_vs_ratio.png")
    assert image.shape == (360 * len(PRESETS), 450 * len(SECONDS), 4)  # 3.6 x 4.5 inch panels at 100 dpi


@pytest.fixture
def broken_preset():
    def broken():
        raise RuntimeError("does not fit")

    bench_presets.PRESETS.register("broken", replace(bench_presets.PRESETS.get("tiny-aero"), name="broken", config=broken))
    yield
    bench_presets.PRESETS.unregister("broken")


def test_a_preset_that_fails_is_recorded_and_the_bench_goes_on(tmp_path, broken_preset):
    config = BenchConfig(
        presets=["broken", "tiny-aero"], audio_seconds=[1.0], methods=["frame"], ratios=[0.5], out=tmp_path, **FAST
    )
    frame = run_bench(config)
    failed = frame[frame["preset"] == "broken"]
    assert len(failed) == 1 and failed["error"].iloc[0] == "build: RuntimeError: does not fit"
    assert frame[frame["preset"] == "tiny-aero"]["error"].isna().all()
    assert "does not fit" in (tmp_path / "bench.md").read_text()


def test_runs_after_the_time_budget_are_recorded_as_skipped(tmp_path):
    config = BenchConfig(
        presets=["tiny-omni"], audio_seconds=[1.0], methods=["frame"], ratios=[0.5], out=None, max_minutes=0, **FAST
    )
    frame = run_bench(config)
    assert (frame["error"] == "skipped: --max-minutes reached").all()


def test_command_line(tmp_path):
    flags = "--preset tiny-aero --audio-seconds 1 --methods frame --ratios 0.1..0.3 --decode-tokens 1 --repeats 1"
    assert main(["bench", *flags.split(), "--warmup", "0", "--device", "cpu", "--out", str(tmp_path), "--quiet"]) == 0
    csv = pd.read_csv(tmp_path / "bench.csv")
    assert csv[csv["method"] == "frame"]["ratio"].tolist() == [0.1, 0.2, 0.3]
    assert csv["command"].iloc[0].startswith("kvprune bench ")


def test_methods_are_specs_of_token_presses_at_one_layer():
    config = BenchConfig(methods="fastv,dart:budget=reference", ratios=[0.5], presets=["tiny-aero"], out=None)
    assert config.k == 2
    assert config.presses == {("fastv", 0.5): FastVPress(ratio=0.5), ("dart:budget=reference", 0.5): DARTPress(ratio=0.5, budget="reference")}
    assert BenchConfig(methods="fastv", layer=3, presets=["tiny-aero"]).k == 3
    for methods in ("knorm", "frame+knorm"):
        with pytest.raises(ValueError, match=re.escape(f"token-dropping presses only, for now; {methods} holds a cache press")):
            BenchConfig(methods=methods, presets=["tiny-aero"])
    with pytest.raises(ValueError, match="presses act at layers 2, 3: give them the same layer"):
        BenchConfig(methods="fastv,frame:layer=3", presets=["tiny-aero"])


def test_the_encoder_column_says_which_audio_encoder_path_ran(bench):
    frame, _ = bench
    fast_path = {"tiny-omni", "tiny-phi4"}  # Qwen2.5-Omni's and Phi-4's encoders have one; the others stay stock
    assert frame.groupby("preset")["encoder"].unique().map(list).to_dict() == {
        preset: ["fast" if preset in fast_path else "stock"] for preset in PRESETS
    }
    stock = run_bench(BenchConfig(presets=["tiny-omni"], audio_seconds=[1.0], methods=["frame"], ratios=[0.5],
                                  out=None, encoder="stock", **FAST))
    assert set(stock["encoder"]) == {"stock"} and stock["error"].isna().all()
    one = frame[(frame["preset"] == "tiny-omni") & (frame["audio_seconds"] == 1.0)]
    for column in ("audio_tokens", "seq_len", "kv_bytes"):
        assert stock[stock["method"] == "none"][column].tolist() == one[one["method"] == "none"][column].tolist()
