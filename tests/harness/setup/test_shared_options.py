"""Sweep and bench share their options: spelled, parsed and refused alike, devices checked before
anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvprune.harness.cli import build_parser, main


@pytest.mark.parametrize(
    "argv, dest, value",
    [
        (["--attn-implementation", "eager"], "attn_implementation", "eager"),
        (["--quiet"], "quiet", True),
        (["--device", "cpu"], "device", "cpu"),
        (["--dtype", "bfloat16"], "dtype", "bfloat16"),
        (["--out", "results"], "out", Path("results")),
        (["--methods", "frame,dart:budget=reference"], "methods", "frame,dart:budget=reference"),
        (["--ratios", "0.1..0.5"], "ratios", "0.1..0.5"),
        (["--layer", "3"], "layer", 3),
        (["--decoding", "static"], "cache", "static"),
    ],
)
def test_sweep_and_bench_spell_and_parse_shared_options_alike(argv, dest, value):
    parser = build_parser()
    for command in ("sweep", "bench"):
        assert getattr(parser.parse_args([command, *argv]), dest) == value, command


def test_the_old_cache_flag_still_sets_how_decoding_runs_and_names_its_new_name(capsys):
    parser = build_parser()
    for command in ("sweep", "bench"):
        assert parser.parse_args([command, "--cache", "dynamic"]).cache == "dynamic"
        assert "note: --cache is now --decoding (the old name still works)" in capsys.readouterr().err
        assert parser.parse_args([command]).cache in (None, "auto")  # not given: auto (the sweep's from its configuration)
    with pytest.raises(SystemExit):
        parser.parse_args(["sweep", "--cache", "paged"])


def test_a_sweep_file_spells_it_decoding_or_cache_but_not_both(tmp_path):
    from kvprune.harness.sweep.config import SweepConfig, SweepConfigError

    path = tmp_path / "sweep.yaml"
    for key in ("decoding", "cache"):
        path.write_text(f"model: demo\ntasks: [demo_count]\n{key}: dynamic\n")
        assert SweepConfig.settings(path)["cache"] == "dynamic"
    path.write_text("model: demo\ntasks: [demo_count]\ndecoding: dynamic\ncache: static\n")
    with pytest.raises(SweepConfigError, match="decoding and cache are one setting"):
        SweepConfig.settings(path)


@pytest.mark.parametrize("argv", [["--dtype", "float8"], ["--attn-implementation", "flash"], ["--no-progress"]])
def test_both_commands_refuse_the_same_bad_options(argv, capsys):
    parser = build_parser()
    for command in ("sweep", "bench"):
        with pytest.raises(SystemExit):
            parser.parse_args([command, *argv])


@pytest.mark.parametrize(
    "device,gpus,message",
    [("nonsense", 0, "--device 'nonsense' is not a device: give e.g. cpu, cuda or cuda:1."),
     ("cuda:0", 0, "--device cuda:0: this machine has no CUDA device (torch "),
     ("cuda:2", 2, "--device cuda:2: this machine has 2 CUDA device(s), cuda:0 to cuda:1; give one of them.")],
)
def test_both_commands_refuse_a_device_this_machine_lacks_before_anything_runs(device, gpus, message, tmp_path,
                                                                              monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    data = tmp_path / "data"
    data.mkdir()
    sweep = ["sweep", "--model", "demo", "--tasks", "had", "--data-root", str(data), "--out", str(tmp_path / "sweep")]
    bench = ["bench", "--preset", "tiny-omni", "--out", str(tmp_path / "bench")]
    for argv in (sweep, bench):
        assert main([*argv, "--device", device, "--quiet"]) == 2
        error = capsys.readouterr().err
        assert message in error and "Traceback" not in error
    assert [path.name for path in tmp_path.iterdir()] == ["data"], "nothing written"
