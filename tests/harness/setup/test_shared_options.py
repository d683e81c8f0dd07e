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
    ],
)
def test_sweep_and_bench_spell_and_parse_shared_options_alike(argv, dest, value):
    parser = build_parser()
    for command in ("sweep", "bench"):
        assert getattr(parser.parse_args([command, *argv]), dest) == value, command


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
