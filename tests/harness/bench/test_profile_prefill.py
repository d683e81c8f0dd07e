"""scripts/profile_prefill.py: its trace arithmetic on a hand-made trace, and the whole script on a tiny
preset on the CPU (the GPU run is the same code with kernels in its traces)."""

from __future__ import annotations

import gc
import re

import pytest

from tests.support.paths import load_script

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def script(monkeypatch):
    return load_script("profile_prefill", monkeypatch)


def _launch(ts, correlation):
    return {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 5, "args": {"correlation": correlation}}


def _kernel(name, ts, dur, correlation):
    return {"cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"correlation": correlation}}


def test_busy_idle_and_the_gaps_the_host_ends(script):
    events = [
        _launch(10, 1), _kernel("a", 100, 100, 1),
        _launch(20, 2), _kernel("b", 150, 150, 2),  # overlaps a: busy counts their union once
        _launch(480, 3), _kernel("c", 500, 100, 3),  # the GPU ran dry at 300; the host launched c at 480
        _launch(550, 4), _kernel("d", 700, 50, 4),  # launched while c ran: that gap is the device's
        _launch(1200, 5), _kernel("e", 1300, 10, 5),  # launched after the window
        {"cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 320, "dur": 150},
        {"cat": "python_function", "name": "/x/site-packages/transformers/m.py(5): forward", "ts": 0, "dur": 900},
        {"cat": "python_function", "name": "/repo/kvprune/engine/session.py(10): _drop", "ts": 400, "dur": 90},
        {"cat": "python_function", "name": "/usr/lib/python3.12/json.py(1): dumps", "ts": 470, "dur": 20},
    ]
    summary = script.summarize_trace(events, start_us=0, end_us=1000)
    assert summary.launches == 4
    assert summary.busy_ms == pytest.approx((200 + 100 + 50) / 1000)
    assert summary.span_ms == pytest.approx(0.75)
    assert summary.lead_in_ms == pytest.approx(0.1)
    assert summary.idle_ms == pytest.approx(0.4)
    first, second = summary.gaps
    assert (first.start_ms, first.idle_ms, first.host_bound, first.kernel) == (pytest.approx(0.3), pytest.approx(0.2), True, "c")
    assert first.frames == ["kvprune/engine/session.py(10): _drop", "transformers/m.py(5): forward"]
    assert first.syncs == ["cudaStreamSynchronize 0.15 ms"]
    assert (second.idle_ms, second.host_bound, second.kernel, second.syncs) == (pytest.approx(0.1), False, "d", [])


def test_short_gaps_are_launch_latency(script):
    events = [_launch(0, 1), _kernel("a", 10, 10, 1), _launch(5, 2), _kernel("b", 20 + script.GAP_US - 1, 10, 2)]
    summary = script.summarize_trace(events, start_us=0, end_us=100)
    assert summary.gaps == []
    assert summary.idle_ms == pytest.approx((script.GAP_US - 1) / 1000 + 0.01)


def test_the_script_runs_on_a_tiny_preset(script, tmp_path):
    args = script.parse_args(["--warmup", "0", "--repeats", "1", "--out", str(tmp_path), "--traces"])
    lines = script.profile(args)
    text = (tmp_path / "profile.md").read_text()
    assert text.splitlines() == lines
    for row in ("| engine, unpruned |", "| engine, fastv 0.9 |", "| ideal 0.9 |", "| ideal 0.9 as a plain forward |", "## Trace: engine, fastv 0.9", "## Trace: ideal 0.9"):
        assert row in text
    pruned = next(line for line in lines if line.startswith("| engine, fastv 0.9 |")).strip("| ").split(" | ")
    assert float(pruned[4]) > 0  # the host's speed, timed before each call
    assert re.fullmatch(r"\d+\.\d\d; \d+\.\d\d", pruned[5]) and re.fullmatch(r"\d+ in 1 calls", pruned[6])  # GC pauses
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.md", "trace_engine.json.gz", "trace_ideal.json.gz"]


def test_gc_pauses_counts_the_collections_inside_its_block_only(script):
    gc.collect()
    with script.GcPauses() as pauses:
        gc.collect(2)
        gc.collect(0)
    gc.collect(2)  # after the block: not counted
    assert pauses.oldest == 1 and pauses.ms > 0
    assert not any(getattr(callback, "__self__", None) is pauses for callback in gc.callbacks)  # removed on exit
