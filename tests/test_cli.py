"""The listing commands and the help say what exists."""

from __future__ import annotations

from kvprune.harness.cli import main


def test_listings(capsys):
    assert main(["presses"]) == 0
    presses = capsys.readouterr().out
    for name, kind in [("fastv", "token"), ("random", "token"), ("frame", "token"), ("dart", "token"), ("knorm", "cache")]:
        assert any(line.split()[:2] == [name, kind] for line in presses.splitlines())
    assert main(["families"]) == 0
    families = capsys.readouterr().out
    for name in ["qwen2_5_omni", "phi4_multimodal", "voxtral", "aero", "qwen2_audio"]:
        assert name in families
    assert main(["tasks"]) == 0
    tasks = capsys.readouterr().out.split()
    for name in ["librispeech", "race", "slue", "tau", "gtzan", "desed", "vesus", "had", "vox_age", "vox_gender", "demo_count"]:
        assert name in tasks
    assert main([]) == 0
    assert "sweep" in capsys.readouterr().out
