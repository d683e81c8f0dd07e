"""A results folder holds one configuration, one writer at a time, and says what went wrong.

On the demo model with small HAD-layout datasets: runs identified by everything that determines
their outputs (two layers never blend, a changed file is not reused, other settings are refused
unless --overwrite, a smaller --limit summarises only its samples), the folder lock (two sweeps at
once, a stale lock), failing fast (a bad layer: exit 2 and no trace), failures that speak (an
unwritable folder, Ctrl-C, NaN or silent audio), the headline and the exit status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import soundfile as sf
import torch

from kvprune.harness.cli import main
from kvprune.harness.sweep.identity import read_plan
from kvprune.harness.sweep.lock import FolderLock, FolderLockedError
from kvprune.harness.sweep.store import read_log
from tests.support import task_fixtures
from tests.support.tiny_models import FAMILIES
from tests.support.results import line_key, result_lines


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    with task_fixtures.clip_seconds(2.0):  # 50 audio tokens per clip
        task_fixtures.had(root, real=2, fake=2)
    return root


def args(data_root: Path, out: Path, *extra: str, methods: str = "frame", ratios: str = "0.5", limit: int = 2) -> list[str]:
    return ["sweep", "--model", "demo", "--tasks", "had", "--methods", methods, "--ratios", ratios, "--limit", str(limit),
            "--data-root", str(data_root), "--out", str(out), "--device", "cpu", "--quiet", "--no-reuse-encoder", "--no-share-layers", *extra]


def command(arguments: list[str]) -> list[str]:
    return [sys.executable, "-m", "kvprune.harness.cli", *arguments]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


# -- identity ----------------------------------------------------------------------------------------
def test_two_layers_into_one_folder_are_two_rows_never_blended(data_root, tmp_path):
    out = tmp_path / "out"
    assert main(args(data_root, out, "--layer", "2", methods="fastv")) == 0
    assert main(args(data_root, out, "--layer", "3", methods="fastv")) == 0
    rows = result_lines(out)
    assert sorted({r["layer"] for r in rows if r["method"] == "fastv"}) == [2, 3] and len(rows) == 2 * 3
    assert len({r["method_id"] for r in rows if r["method"] == "fastv"}) == 2
    summary = pd.read_csv(out / "summary.csv")  # the sweep's own outputs: what it asked for, layer 3
    assert set(zip(summary["method"], summary["layer"].fillna(-1))) == {("none", -1), ("fastv", 3)}
    assert main(["report", str(out), "--all"]) == 0  # every result, each layer its own row
    everything = pd.read_csv(out / "summary.csv").set_index("method")
    assert set(everything.index) == {"none", "fastv (layer 2)", "fastv (layer 3)"}
    assert (everything["samples"] == 2).all(), "each row summarises its own two samples, not four"
    for layer in (2, 3):
        mine = [r for r in rows if r["layer"] == layer]
        assert everything.loc[f"fastv (layer {layer})", "kept_tokens"] == np.mean([r["kept_tokens"] for r in mine])


def test_a_changed_audio_file_under_the_same_name_is_not_reused(data_root, tmp_path, capsys):
    data = tmp_path / "data"
    (data / "HAD").mkdir(parents=True)
    for folder in ("real", "fake"):
        (data / "HAD" / folder).mkdir()
        for wav in (data_root / "HAD" / folder).glob("*.wav"):
            (data / "HAD" / folder / wav.name).write_bytes(wav.read_bytes())
    out = tmp_path / "out"
    assert main(args(data, out)) == 0
    before = result_lines(out)
    changed = data / "HAD" / "real" / "r0.wav"  # same name and length, other content
    t = np.arange(2 * 16_000) / 16_000
    sf.write(changed, 0.1 * np.sin(2 * np.pi * 880 * t), 16_000)
    capsys.readouterr()
    assert main(args(data, out)) == 0
    assert "1 sample(s) changed since the last sweep" in capsys.readouterr().err
    rows = result_lines(out)
    rerun = rows[len(before):]
    assert {r["sample_id"] for r in rerun} == {"real/r0.wav"} and len(rerun) == 2, "only the changed sample runs again"
    assert rerun[0]["input_hash"] != next(r["input_hash"] for r in before if r["sample_id"] == "real/r0.wav")
    assert (pd.read_csv(out / "summary.csv")["samples"] == 2).all(), "the summary reads the new result, not both"
    assert main(args(data_root, out)) == 0  # another data root holding the same content: nothing to redo
    assert len(result_lines(out)) == len(rows)
    other = tmp_path / "other"  # another data root, the same file names, other content: nothing is reused
    for folder, seconds in (("real", 1.5), ("fake", 2.5)):
        for name in ("r0", "r1") if folder == "real" else ("f0", "f1"):
            task_fixtures.write_audio(other / "HAD" / folder / f"{name}.wav", seconds)
    assert main(args(other, out)) == 0
    assert len(result_lines(out)) == len(rows) + 4
    assert {r["audio_seconds"] for r in result_lines(out)[-4:]} == {1.5, 2.5}


def test_other_settings_are_refused_by_name_and_overwrite_starts_afresh(data_root, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(args(data_root, out)) == 0
    kept, settings = snapshot(out), {r["settings_id"] for r in result_lines(out)}
    capsys.readouterr()
    assert main(args(data_root, out, "--attn-implementation", "eager", "--max-new-tokens", "3")) == 2
    error = capsys.readouterr().err
    assert "attn_implementation: sdpa before, eager now" in error and "max_new_tokens: unset before, 3 now" in error
    assert "another --out" in error and "--overwrite" in error
    assert snapshot(out) == kept, "a refused start changes nothing"
    assert main(args(data_root, out, "--attn-implementation", "eager", "--max-new-tokens", "3", "--overwrite")) == 0
    rows = result_lines(out)
    assert len(rows) == 4 and not {r["settings_id"] for r in rows} & settings, "only the new settings' results"
    assert read_plan(out).settings["attn_implementation"] == "eager"
    assert all(r["new_tokens"] <= 3 for r in rows)


def test_the_decoding_cache_the_protocol_the_encoder_and_a_keep_rule_are_part_of_a_runs_identity(data_root, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(args(data_root, out)) == 0
    capsys.readouterr()
    assert main(args(data_root, out, "--cache", "static", "--protocol", "audiomarathon", "--stock-encoder")) == 2
    error = capsys.readouterr().err
    assert "cache: engine before, static now" in error and "protocol: unset before, audiomarathon now" in error
    assert "encoder: fast before, stock now" in error, "the same outputs, not the same prefill times"
    assert main(args(data_root, out, "--cache", "engine")) == 0, "auto resolves to the engine: the same runs"
    assert len(result_lines(out)) == 4
    assert main(args(data_root, out, methods="frame,frame:keep_rule=floor")) == 0, "another keep rule is another method"
    rows = result_lines(out)
    ids = {r["method"]: r["method_id"] for r in rows if r["method"] != "none"}
    assert len(rows) == 6 and set(ids) == {"frame", "frame:keep_rule=floor"} and len(set(ids.values())) == 2


def test_a_smaller_limit_summarises_only_its_samples(data_root, tmp_path):
    out = tmp_path / "out"
    assert main(args(data_root, out, limit=4)) == 0
    assert main(args(data_root, out, limit=1)) == 0
    assert len(result_lines(out)) == 8, "the smaller limit's sample was done already"
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["samples"] == 1).all()
    assert main(["report", str(out), "--all"]) == 0
    assert (pd.read_csv(out / "summary.csv")["samples"] == 4).all()


def test_the_report_of_an_unfinished_sweep_says_which_runs_are_missing(data_root, tmp_path):
    out = tmp_path / "out"
    assert main(args(data_root, out)) == 0  # 2 samples x (unpruned + frame 0.5)
    assert "Incomplete" not in (out / "report.md").read_text()
    results = out / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    assert len(lines) == 4
    results.write_text("".join(lines[:-1]))  # the last run never finished
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "> **Incomplete: 1 of the runs the last sweep asked for have no result yet**" in report
    assert "> - demo / had: 3 of 4 runs" in report
    assert main(["report", str(out), "--all"]) == 0  # every result, whatever a sweep asked for: nothing to miss
    assert "Incomplete" not in (out / "report.md").read_text()


# -- fail fast, leave no trace -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change,message",
    [(("--layer", "9"), "method frame cannot run on demo: layer=9 is invalid for Qwen2.5-Omni with 4 decoder layers"),
     (("--methods", "fastv,knorm:layer=4"), "method knorm:layer=4 cannot run on demo: layer=4 is invalid"),
     (("--tasks", "nope"), "unknown task 'nope'"),
     (("--max-new-tokens", "0"), "max_new_tokens=0 is invalid: it must be a whole number, at least 1"),
     (("--device", "cuda"), "--device cuda: this machine has no CUDA device (torch "),
     (("--device", "nonsense"), "--device 'nonsense' is not a device: give e.g. cpu, cuda or cuda:1.")],
)
def test_a_bad_configuration_exits_2_before_any_sample_and_leaves_no_trace(data_root, tmp_path, capsys, monkeypatch, change, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU, for --device cuda
    fresh, existing = tmp_path / "fresh", tmp_path / "existing"
    assert main(args(data_root, existing)) == 0
    kept = snapshot(existing)
    for out in (fresh, existing):
        arguments = args(data_root, out)
        flag, value = change
        if flag in arguments:
            arguments[arguments.index(flag) + 1] = value
        else:
            arguments += [flag, value]
        assert main(arguments) == 2
        assert message in capsys.readouterr().err
    assert not fresh.exists(), "a failed start creates no folder"
    assert snapshot(existing) == kept, "nor changes one"


def test_a_model_whose_static_cache_cannot_hold_a_pruned_prompt_is_refused_before_anything_runs(data_root, tmp_path, capsys):
    """--cache static (what auto means on a GPU) on Gemma-3n, whose sliding-window and KV-sharing layers a
    pruned static cache cannot lay out: refused from the checkpoint's config, with both fixes named."""
    model = tmp_path / "gemma3n"
    FAMILIES["gemma3n"].config.save_pretrained(model)  # the check needs only the config: no weights are read
    arguments = args(data_root, tmp_path / "out", "--decoding", "static")
    arguments[arguments.index("--model") + 1] = str(model)
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert f"method frame cannot run on {model}: Gemma-3n: kvprune cannot prune into a static cache" in error
    assert error.rstrip().endswith("On the command line: --decoding dynamic.") and not (tmp_path / "out").exists()


def test_an_unwritable_output_folder_is_refused_with_a_message(data_root, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(args(data_root, blocker / "out")) == 2
    error = capsys.readouterr().err
    assert f"cannot write results to {blocker / 'out'}" in error and "--out" in error and "Traceback" not in error


# -- one writer per folder -----------------------------------------------------------------------------
def test_a_folder_in_use_is_refused_and_released_after(data_root, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with FolderLock(out):
        assert main(args(data_root, out)) == 2
        error = capsys.readouterr().err
        assert f"another sweep is writing to {out} (pid {os.getpid()}" in error and "another --out" in error
        assert [p.name for p in out.iterdir()] == [".kvprune.rank0.lock"]
    assert main(args(data_root, out)) == 0


def test_a_lock_of_another_world_size_is_refused_and_a_stale_lock_taken_over(tmp_path):
    with FolderLock(tmp_path, rank=1, world_size=2):
        with pytest.raises(FolderLockedError, match="another sweep is writing"):
            FolderLock(tmp_path).acquire()  # a single-process sweep beside a 2-process one
        with pytest.raises(FolderLockedError):
            FolderLock(tmp_path, rank=1, world_size=2).acquire()
        peer = FolderLock(tmp_path, rank=0, world_size=2)  # the same launch's other process
        peer.acquire()
        peer.release()
    (tmp_path / ".kvprune.rank0.lock").write_text('{"pid": 999999999, "host": "gone", "started": "earlier"}\n')
    lock = FolderLock(tmp_path)  # left by a killed sweep: nobody holds it
    lock.acquire()
    assert lock.taken_over["pid"] == 999999999
    lock.release()
    assert not list(tmp_path.glob("*.lock"))


def test_two_sweeps_started_together_one_refuses_and_no_row_is_doubled(data_root, tmp_path):
    out = tmp_path / "out"
    arguments = args(data_root, out, methods="fastv,frame,random", ratios="0.2,0.5,0.8", limit=4)
    processes = [subprocess.Popen(command(arguments), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in processes]
    codes = sorted(p.returncode for p in processes)
    assert codes == [0, 2], outputs
    refused = outputs[[p.returncode for p in processes].index(2)][1]
    assert "another sweep is writing to" in refused
    rows = result_lines(out)
    assert len(rows) == len({line_key(r) for r in rows}) == 4 * 10


# -- failures that speak -------------------------------------------------------------------------------
def _default_ctrl_c() -> None:
    """In the child, before the sweep starts: Ctrl-C interrupts, as in a user's terminal. A test run started in the
    background of a shell without job control ignores SIGINT, and a child inherits that (Python then installs no
    KeyboardInterrupt): the sweep would run to its end through the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_says_how_to_resume_and_the_rerun_completes(data_root, tmp_path):
    out = tmp_path / "out"
    arguments = args(data_root, out, methods="fastv,frame,dart", ratios="0.3,0.6", limit=4)
    process = subprocess.Popen(command(arguments), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_default_ctrl_c)
    results = out / "results.jsonl"
    deadline, pressed = time.time() + 300, False
    while time.time() < deadline and process.poll() is None:
        if results.exists() and results.read_text().count("\n") >= 3:
            process.send_signal(signal.SIGINT)
            pressed = True
            break
        time.sleep(0.01)
    _, error = process.communicate(timeout=120)
    lines = {p.name: p.read_text().count("\n") for p in out.iterdir() if p.is_file()} if out.exists() else {}
    assert process.returncode == 130, f"exit {process.returncode}, Ctrl-C pressed: {pressed}, lines per file: {lines}, {error!r}"
    written = len(result_lines(out))
    assert f"interrupted after {written} new result rows" in error and "run the same command to resume" in error
    assert "Traceback" not in error
    assert written < 4 * 7 and not list(out.glob("*.lock")), "stopped early, lock released"
    assert main(arguments) == 0
    rows = result_lines(out)
    assert len(rows) == len({line_key(r) for r in rows}) == 4 * 7


def test_nan_and_silent_audio_become_error_rows_counted_in_the_exit_status_and_the_report(tmp_path, capsys):
    root = tmp_path / "data"
    task_fixtures.had(root, real=2, fake=1)
    real = sorted((root / "HAD" / "real").glob("*.wav"))
    sf.write(real[0], np.full(16_000, np.nan, dtype=np.float32), 16_000, subtype="FLOAT")
    sf.write(real[1], np.zeros(16_000, dtype=np.float32), 16_000, subtype="FLOAT")
    out = tmp_path / "out"
    assert main(args(root, out, limit=3)) == 1
    printed = capsys.readouterr().out
    errors = {r["sample_id"]: r["error"] for r in result_lines(out) if r["error"]}
    assert "NaN or infinite samples" in errors["real/r0.wav"] and "digital silence" in errors["real/r1.wav"]
    assert "4 of 6 runs failed" in printed and "2 × AudioLoadError" in printed
    report = (out / "report.md").read_text()
    assert report.index("**Warning: 4 of 6 runs failed.**") < report.index("## Headline")


def test_the_sweep_ends_with_a_headline_and_the_file_to_open(data_root, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(args(data_root, out, methods="frame,fastv", ratios="0.3,0.6")) == 0
    printed = capsys.readouterr().out
    summary = pd.read_csv(out / "summary.csv").set_index(["method", "ratio"])
    baseline = summary.loc[("none", 0.0), "score"]
    assert f"had (f1_macro, higher is better; 2 samples): unpruned {baseline:.1f}" in printed
    lines = printed.splitlines()
    header = next(line for line in lines if line.strip().startswith("ratio"))
    assert header.split() == ["ratio", "0.3", "0.6"]
    frame_scores = next(line for line in lines if line.strip().startswith("frame")).split()
    assert frame_scores == ["frame", "score", f"{summary.loc[('frame', 0.3), 'score']:.1f}", f"{summary.loc[('frame', 0.6), 'score']:.1f}"]
    assert f"Open {(out / 'report.md').resolve()}" in printed
    report = (out / "report.md").read_text()
    assert report.startswith("# kvprune sweep: out\n\n## Headline\n")
    assert "| method | ratio 0.3 | ratio 0.6 |" in report and "prefill speedup" in report and "KV cache saved" in report
    assert "Timings are noise-level here" in report or "within the timing noise" in report


def test_runs_jsonl_records_the_identity_of_each_start(data_root, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(args(data_root, out, "--layer", "3", methods="fastv")) == 0
    assert "nothing left to run" not in capsys.readouterr().err
    assert main(args(data_root, out, "--layer", "3", methods="fastv")) == 0  # everything is done: said, not run
    assert "note: nothing left to run: every run this sweep asks for has a result" in capsys.readouterr().err
    assert len(read_log(out)) == 1, "a start that runs nothing records no run"
    run = read_log(out)[-1]
    assert run["settings"]["dtype"] == "auto" and run["settings"]["long_audio"] == "split"
    assert run["model_fingerprint"].startswith("local:")
    (method,) = run["methods"].values()
    assert (method["label"], method["layer"], method["spec"]) == ("fastv", 3, "FastVPress(ratio=0.0, layer=3, keep_rule='round', scope='audio')")


def test_ratio_lists_are_sorted_without_repeats_and_ranges_may_run_down(data_root):
    from kvprune.harness.sweep.config import SweepConfig

    build = lambda ratios: SweepConfig.build(models="demo", tasks="had", methods="frame", data_root=data_root, ratios=ratios).ratios
    assert build("0.5,0.5,0.3") == [0.3, 0.5]
    assert build("0.9..0.7") == build("0.7..0.9") == [0.7, 0.8, 0.9]
