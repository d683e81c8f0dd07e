"""Drills a new user runs on a results folder, each ending in the documented outcome.

On the demo model with small AudioMarathon-layout datasets: corrected gold answers are scored again
without generating again; audio changed in place with its times kept is noticed; two layers in one
folder are announced in the report; wrong YAML types, a full disk, an unreadable audio file and a
garbage line in results.jsonl each end in a sentence with the documented exit status."""

from __future__ import annotations

import builtins
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from kvprune.harness import audio as audio_module
from kvprune.harness.cli import main
from kvprune.harness.sweep import identity, store as store_module
from kvprune.harness.sweep.lock import FolderLock
from kvprune.harness.sweep.store import read_log
from tests.support import task_fixtures
from tests.support.results import line_key, result_lines


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return task_fixtures.gtzan_and_had(tmp_path_factory.mktemp("data"), real=2, fake=1)


def args(data_root: Path, out: Path, *extra: str, tasks: str = "had", methods: str = "frame", limit: int = 3,
         timing: bool = False) -> list[str]:
    """A small demo sweep (``timing``: with the timing pass, which reruns samples alone for their timings)."""
    return ["sweep", "--model", "demo", "--tasks", tasks, "--methods", methods, "--ratios", "0.5", "--limit", str(limit),
            "--data-root", str(data_root), "--out", str(out), "--device", "cpu", "--quiet",
            *([] if timing else ["--timing-samples", "0"]), *extra]


def model_runs(out: Path) -> list[dict]:
    """The lines of runs.jsonl that record a model's start (not what its decoding compiled)."""
    return [run for run in read_log(out) if run.get("kind") is None]


def copy_tree(source: Path, target: Path) -> Path:
    for path in source.rglob("*"):
        if path.is_file():
            (target / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (target / path.relative_to(source)).write_bytes(path.read_bytes())
    return target


# -- labels and audio changed after a sweep --------------------------------------------------------------
def test_corrected_gold_answers_are_scored_again_from_the_stored_outputs(data_root, tmp_path, capsys):
    data = copy_tree(data_root, tmp_path / "data")
    out = tmp_path / "out"
    assert main(args(data, out, tasks="gtzan", timing=True)) == 0
    before = result_lines(out)
    assert len(before) == 8 and len(model_runs(out)) == 1  # 2 samples x 2 runs, each also in the timing pass
    metadata = data / "GTZAN" / "music_genre_classification_meta.json"
    items = json.loads(metadata.read_text())
    for item in items:  # every gold moves to the next letter; options, prompt and audio stay
        item["answer_gt"] = "ABCD"["ABCD".index(item["answer_gt"]) - 3]
    metadata.write_text(json.dumps(items))
    capsys.readouterr()

    assert main(args(data, out, tasks="gtzan", timing=True)) == 0
    printed = capsys.readouterr()
    assert "scored 4 stored result(s) of 2 sample(s) again from their stored outputs" in printed.err
    assert "nothing was generated again" in printed.err and "nothing left to run" in printed.err
    assert len(model_runs(out)) == 1, "no model was loaded"
    rows = result_lines(out)
    rescored = rows[len(before):]
    assert len(rescored) == 8 and all(row["rescored"] for row in rescored), "both passes' rows"
    gold = {item["path"]: item["answer_gt"] for item in items}
    earlier = {line_key(row): row for row in before}
    assert set(earlier) == {line_key(row) for row in rescored}
    for new in rescored:
        old = earlier[line_key(new)]
        assert new["output"] == old["output"] and new["time"] == old["time"] and new.get("prefill_s") == old.get("prefill_s")
        assert new["reference"] == gold[new["sample_id"]] != old["reference"]
        assert new["correct"] == float(new["parsed"] == gold[new["sample_id"]])
    summary = pd.read_csv(out / "summary.csv").set_index("method")
    for method in ("none", "frame"):
        mine = [row for row in rescored if row["method"] == method and not row.get("pass")]
        assert summary.loc[method, "accuracy"] == pytest.approx(100 * np.mean([row["correct"] for row in mine]))
        assert summary.loc[method, "samples"] == 2

    assert main(args(data, out, tasks="gtzan", timing=True)) == 0  # the same labels again: nothing to do
    assert "scored" not in capsys.readouterr().err and len(result_lines(out)) == len(rows)


def test_audio_changed_in_place_with_its_times_kept_runs_again_and_rehash_reads_every_file(data_root, tmp_path, capsys):
    data = copy_tree(data_root, tmp_path / "data")
    out = tmp_path / "out"
    assert main(args(data, out)) == 0
    count = len(result_lines(out))
    changed = data / "HAD" / "real" / "r0.wav"
    times = changed.stat()
    t = np.arange(2 * 16_000) / 16_000
    sf.write(changed, 0.1 * np.sin(2 * np.pi * 880 * t), 16_000)  # same length, other content
    os.utime(changed, ns=(times.st_atime_ns, times.st_mtime_ns))  # as `touch -r` puts the times back
    assert changed.stat().st_size == times.st_size and changed.stat().st_mtime_ns == times.st_mtime_ns
    capsys.readouterr()
    assert main(args(data, out)) == 0
    assert "1 sample(s) changed since the last sweep" in capsys.readouterr().err
    rerun = result_lines(out)[count:]
    assert {row["sample_id"] for row in rerun} == {"real/r0.wav"} and len(rerun) == 2

    cache = out / "audio-digests.json"  # a cache that lies (a file system without status-change times)
    cache.write_text(json.dumps({key: "0" * 32 for key in json.loads(cache.read_text())}))
    assert main(args(data, out, "--rehash-audio")) == 0
    assert "nothing left to run" in capsys.readouterr().err, "every file's content read again: nothing changed"
    cached = identity.AudioDigests(out)  # the cache, corrected: each file's digest of its content
    assert all(cached(wav) == identity.file_digest(wav) for wav in (data / "HAD").rglob("*.wav"))


# -- a folder holding runs of several commands -------------------------------------------------------------
def test_two_layers_into_one_folder_the_report_says_what_else_it_holds(data_root, tmp_path, capsys):
    out = tmp_path / "out"
    first = args(data_root, out, "--layer", "2", methods="fastv", limit=2)
    assert main(first) == 0
    assert main(args(data_root, out, "--layer", "3", methods="fastv", limit=2)) == 0
    printed = capsys.readouterr().out
    report = (out / "report.md").read_text()
    banner = report[: report.index("## Headline")]
    assert "This report covers the runs the last command asked for" in banner
    assert "also holds 2 result(s) that earlier commands added" in banner
    assert "demo / had: fastv (layer 2) at ratio 0.5, 2 sample(s)" in banner
    assert f"added by `kvprune {' '.join(first)}`" in banner
    assert f"`kvprune report {out} --all`" in banner
    assert "2 result(s) of earlier commands that this summary leaves out (fastv (layer 2))" in printed
    runs = model_runs(out)
    assert [run["command"] for run in runs] == [f"kvprune {' '.join(first)}", f"kvprune {' '.join(args(data_root, out, '--layer', '3', methods='fastv', limit=2))}"]
    assert all(run["cpu_threads"] == 1 for run in runs), "the demo model on the CPU runs on one thread"
    assert set(pd.read_csv(out / "summary.csv")["method"]) == {"none", "fastv"}
    assert main(["report", str(out), "--all"]) == 0
    assert set(pd.read_csv(out / "summary.csv")["method"]) == {"none", "fastv (layer 2)", "fastv (layer 3)"}
    assert "This report covers the runs the last command" not in (out / "report.md").read_text()


# -- failures that end in a sentence ------------------------------------------------------------------------
@pytest.mark.parametrize("line,key", [("limit: ten", "limit"), ("layer: two", "layer"), ("model: 5", "model"),
                                      ("retry_errors: maybe", "retry_errors"), ("ratios: {a: 1}", "ratios")])
def test_a_sweep_file_with_a_wrong_type_exits_2_naming_the_key(data_root, tmp_path, capsys, line, key):
    config = tmp_path / "sweep.yaml"
    config.write_text(f"tasks: had\ndata_root: {data_root}\n{line}\n")
    out = tmp_path / "out"
    assert main(["sweep", "--config", str(config), "--out", str(out), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert f"sweep config {config}: {key}: expected" in error and "Traceback" not in error
    assert not out.exists()


def test_a_full_disk_says_so_releases_the_lock_and_the_rerun_completes(data_root, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    write_line, lines = store_module.write_line, []

    def fill_up(handle, line):  # the disk fills during the fourth result row: half of it is written
        if handle.name.endswith("results.jsonl"):
            if len(lines) == 3:
                handle.write(line[: len(line) // 2].encode())
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            lines.append(line)
        write_line(handle, line)

    monkeypatch.setattr(store_module, "write_line", fill_up)
    assert main(args(data_root, out)) == 3
    error = capsys.readouterr().err
    assert f"cannot write {out / 'results.jsonl'} (No space left on device); the 3 rows this sweep wrote before are kept" in error
    assert "rerun the same command to resume" in error and "Traceback" not in error
    assert not list(out.glob(".kvprune*.lock")), "the lock is released and its file removed"
    assert not (out / "results.jsonl").read_text().endswith("\n"), "a line cut short by the full disk"
    monkeypatch.undo()

    assert main(args(data_root, out)) == 0
    rerun = capsys.readouterr()
    assert "warning" not in rerun.err
    rows = result_lines(out)
    assert len(rows) == len({line_key(row) for row in rows}) == 3 * 2
    assert all(json.loads(line) for line in (out / "results.jsonl").read_text().splitlines())


def test_a_full_disk_while_taking_the_lock_leaves_no_lock_file(tmp_path, monkeypatch):
    import kvprune.harness.sweep.lock as lock_module

    def full(*_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(lock_module, "_me", full)
    with pytest.raises(OSError, match=r"cannot write .*\.kvprune\.rank0\.lock \(No space left on device\); nothing ran"):
        FolderLock(tmp_path).acquire()
    assert not list(tmp_path.iterdir())


def _unreadable_sweep(data_root: Path, tmp_path: Path, capsys) -> tuple[list[dict], str]:
    out = tmp_path / "out"
    assert main(args(data_root, out)) == 1, "a run failed: exit status 1"
    return result_lines(out), capsys.readouterr().out


def _check_unreadable(rows: list[dict], printed: str, name: str) -> None:
    failed = [row for row in rows if row["error"]]
    assert {row["sample_id"] for row in failed} == {name} and len(failed) == 2
    assert all("permission denied; make it readable" in row["error"] for row in failed)
    assert len(rows) == 3 * 2 and all(row["output"] for row in rows if not row["error"]), "the sweep went on"
    assert "2 of 6 runs failed" in printed


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_an_unreadable_audio_file_becomes_an_error_row(data_root, tmp_path, capsys):
    data = copy_tree(data_root, tmp_path / "data")
    (data / "HAD" / "real" / "r1.wav").chmod(0)
    _check_unreadable(*_unreadable_sweep(data, tmp_path, capsys), "real/r1.wav")


def test_a_file_the_system_refuses_to_read_becomes_an_error_row(data_root, tmp_path, capsys, monkeypatch):
    """The same drill where permissions cannot be enforced (as root): the operating system's refusal,
    raised where the sweep opens the file (to digest it, to load it)."""
    refused = (data_root / "HAD" / "real" / "r1.wav").resolve()

    def refusing_open(file, *rest, **options):
        if Path(file).resolve() == refused:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return builtins.open(file, *rest, **options)

    monkeypatch.setattr(audio_module, "open", refusing_open, raising=False)
    monkeypatch.setattr(identity, "open", refusing_open, raising=False)
    _check_unreadable(*_unreadable_sweep(data_root, tmp_path, capsys), "real/r1.wav")


def test_a_garbage_line_is_reported_once_by_line_number_then_set_aside(data_root, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(args(data_root, out, limit=2)) == 0
    results = out / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join([lines[0], "this is not json\n", *lines[1:]]))
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    error = capsys.readouterr().err
    assert error.count("results.jsonl, line 2: not a JSON object") == 1 and error.startswith("kvprune report: warning:")
    assert "warnings.warn" not in error and "Warning:" not in error and len(error.strip().splitlines()) == 1
    assert main(args(data_root, out, limit=2)) == 0
    error = capsys.readouterr().err
    assert "results.jsonl: line 2 held no result (not a JSON object) and was moved to results.jsonl.unreadable" in error
    assert (out / "results.jsonl.unreadable").read_text() == "line 2: this is not json\n"
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().err == "", "reported once: later commands read a clean file"


def test_a_bad_ratio_fails_before_torch_is_imported():
    code = ("import sys; from kvprune.harness.cli import main; code = main(['sweep', '--ratios', 'abc']); "
            "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False", "False"], done.stderr
    assert "cannot read ratios 'abc'" in done.stderr and "Traceback" not in done.stderr
