"""The typed result row (``rows.ResultRow``): the JSON it writes is the line results.jsonl has always held
(a sample's times as ``prefill_s``..., a batch's as ``batch_prefill_s``...), and a line read back, of
this version or an older one, writes back exactly the fields it was read with, in their order."""

from __future__ import annotations

import json
from dataclasses import replace

from kvprune.harness.sweep.rows import BatchTiming, Generation, Received, ResultRow, SampleTiming, results_frame

SAMPLE = dict(model="demo", family="qwen2_5_omni", task="demo_pitch", sample_id="s1", item="s1", input_hash="ih",
              grade_hash="gh", settings_id="si", reference="C", meta={"task_name": "pitch"}, position=0, warmup=False)
RECEIVED = Received(audio_seconds=15.0, audio_seconds_received=15.0, audio_clips=1, long_audio=None, audio_tokens=375,
                    video_tokens=0)
GENERATION = Generation(batch_size=2, batch_id="b1", encoder_reused=True, layers_reused=False, engine="kvprune",
                        engine_note=None, graphs_captured=0, compilations=0)


def _row(**changes) -> ResultRow:
    return replace(ResultRow(**SAMPLE), received=RECEIVED, method="fastv", ratio=0.5, layer=2, method_id="m1", output="C",
                   parsed="C", scores={"correct": 1.0}, kept_tokens=188, kept_video_tokens=0, time="t", **changes)


def test_a_batch_row_writes_the_batch_keys_in_the_order_results_jsonl_has_them():
    row = _row(started="s", generation=GENERATION,
               timing=BatchTiming(prefill_s=0.5, decode_s=0.25, new_tokens=2, batch_new_tokens=3, cache="engine", compiled=False))
    assert list(row.to_json()) == [
        "started", *SAMPLE, "audio_seconds", "audio_seconds_received", "audio_clips", "long_audio", "audio_tokens",
        "video_tokens", "method", "ratio", "layer", "method_id", "output", "parsed", "correct", "kept_tokens",
        "kept_video_tokens", "error", "time", "batch_size", "batch_id", "encoder_reused", "layers_reused", "engine",
        "engine_note", "graphs_captured", "compilations", "batch_prefill_s", "batch_decode_s", "new_tokens",
        "batch_new_tokens", "cache", "compiled",
    ]
    written = row.to_json()
    assert (written["batch_prefill_s"], written["new_tokens"], written["batch_new_tokens"]) == (0.5, 2, 3)
    assert "prefill_s" not in written and "pass" not in written and "dry_run" not in written


def test_a_timed_row_writes_its_own_times_and_its_pass():
    timing = SampleTiming(prefill_s=0.5, decode_s=0.25, new_tokens=2, peak_memory_bytes=None, kv_cache_bytes=10,
                          kv_held_bytes=8, cache="engine", compiled=False, decode_tokens_per_s=4.0)
    written = _row(generation=GENERATION, timing=timing, pass_name="timing").to_json()
    keys = list(written)
    assert keys[keys.index("error"):] == [
        "error", "time", "pass", "batch_size", "batch_id", "encoder_reused", "layers_reused", "engine", "engine_note",
        "graphs_captured", "compilations", "prefill_s", "decode_s", "new_tokens", "peak_memory_bytes", "kv_cache_bytes",
        "kv_held_bytes", "cache", "compiled", "decode_tokens_per_s",
    ]
    assert written["pass"] == "timing" and written["peak_memory_bytes"] is None and written["decode_tokens_per_s"] == 4.0
    assert "batch_prefill_s" not in written and "started" not in written


def test_a_row_read_back_writes_what_it_was_read_with():
    """A line of an older version (no kv_held_bytes, a field this one does not know) survives a read and
    write unchanged; a field set since (rescoring) goes at its end."""
    line = dict(SAMPLE, method="none", ratio=0.0, layer=None, method_id="none", output="C", parsed="C", correct=1.0,
                legacy_note="kept", kept_tokens=375, error=None, time="t", prefill_s=0.5, decode_s=0.25, new_tokens=2,
                peak_memory_bytes=None, kv_cache_bytes=10, cache="dynamic", compiled=False)
    row = ResultRow.from_json(json.loads(json.dumps(line)))
    assert row.to_json() == line and list(row.to_json()) == list(line)
    assert isinstance(row.timing, SampleTiming) and row.timing.kv_held_bytes is None and row.received is None
    assert row.scores == {"correct": 1.0, "legacy_note": "kept"}
    rescored = replace(row, scores={**row.scores, "correct": 0.0}, rescored="now").to_json()
    assert list(rescored) == [*line, "rescored"] and rescored["correct"] == 0.0
    assert row.key == ResultRow.from_json(dict(line, ratio=0.0000001)).key  # ratios keyed to 6 decimals


def test_the_frame_has_a_column_per_written_field():
    batch = _row(timing=BatchTiming(prefill_s=0.5, decode_s=0.25, new_tokens=2, batch_new_tokens=3, cache="engine",
                                    compiled=False))
    failed = replace(ResultRow(**SAMPLE), method="none", ratio=0.0, method_id="none", error="OSError: no audio")
    frame = results_frame([batch, failed])
    assert frame["batch_prefill_s"].tolist()[0] == 0.5 and frame["batch_prefill_s"].isna().tolist()[1]
    assert "prefill_s" not in frame and frame["error"].isna().tolist() == [True, False]
