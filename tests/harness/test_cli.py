"""The listing commands and the help say what exists."""

from __future__ import annotations

import argparse

import pytest

from kvprune.harness.cli import build_parser, main


def test_listings(capsys):
    assert main(["presses"]) == 0
    presses = capsys.readouterr().out
    for name, kind in [("fastv", "token"), ("random", "token"), ("frame", "token"), ("dart", "token"), ("knorm", "cache")]:
        assert any(line.split()[:2] == [name, kind] for line in presses.splitlines())
    listed = {line.split()[0]: line.split()[1:] for line in presses.splitlines() if line[:1].strip()}
    assert listed["dart"] == ["token", "audio|video", "layer=2", "keep_rule=round", "scope=audio", "pivot_audio=4", "pivot_text=4",
                              "budget=equal"]
    assert listed["snapkv"] == ["cache", "audio|video|prompt", "layer=1", "scope=audio", "window=64", "keep_rule=round", "kernel=5",
                                "pool=avg"]
    assert listed["pyramidkv"][:2] == ["cache", "audio|video|prompt"] and "press=snapkv" in listed["pyramidkv"]
    assert "use_covariance=true" in listed["expected_attention"], "booleans as a method spec writes them"
    scorers = presses.split("uses: one of ")[1].split(". ")[0].split(", ")
    assert "snapkv" in scorers and not {"pyramidkv", "adakv"} & set(scorers), "a budget policy scores with another press"
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


def test_the_task_listing_says_benchmark_metric_protocols_and_data_layout(capsys):
    assert main(["tasks"]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert lines["gtzan"][1:] == ["AudioMarathon", "f1_macro", "kvprune,", "audiomarathon", "official"]
    assert lines["starbench_pc"][1:] == ["STAR-Bench", "starbench_aa", "official", "official"]
    assert lines["mmau"][1:] == ["MMAU", "string_match", "official", "official"]
    assert lines["avibench_amic"][1:] == ["AVI-Bench", "amic_average", "official", "official"]
    assert lines["staudioqa_c"][1:] == ["ST-AudioQA", "st_family_average", "provisional", "provisional"]
    assert lines["starbench"][1:4] == ["STAR-Bench", "Final", "MA:"]  # the suite and its aggregate


def _commands() -> dict:
    return build_parser()._subparsers._group_actions[0].choices


@pytest.mark.parametrize("command", ["sweep", "bench"])
def test_every_option_says_its_default(command):
    for action in _commands()[command]._actions:
        if action.dest == "help" or action.help == argparse.SUPPRESS:  # a renamed flag's old spelling is hidden
            continue
        assert action.help and "default" in action.help, f"{command} --{action.dest} says nothing of its default"


def test_every_command_says_what_it_does():
    parser = build_parser()
    listed = {action.dest: action.help for action in parser._subparsers._group_actions[0]._choices_actions}
    for name, command in _commands().items():
        if name != "sweep":  # the sweep's help is its options and epilog
            assert command.description == listed[name], f"kvprune {name} --help does not say what it does"


def test_sweep_help_explains_every_option_with_its_default_and_the_exit_status():
    sweep = _commands()["sweep"]
    assert max(len(line) for line in sweep.epilog.splitlines()) <= 100, "the epilog is printed as written"
    methods = next(action for action in sweep._actions if action.dest == "methods")
    assert "default: every registered token-dropping press (built in: fastv, random, frame, dart)" in methods.help
    from kvprune.harness.sweep.config import default_methods
    from kvprune.press import list_presses

    assert [m.label for m in default_methods()] == list_presses(kind="token"), "the help says what the default is"
    epilog = " ".join(sweep.epilog.split())
    for code in ("0 all runs succeeded", "1 some runs failed", "2 the configuration is wrong", "3 a file of the results folder",
                 "130 interrupted"):
        assert code in epilog
    assert "--overwrite" in epilog and "One sweep writes to a folder at a time" in epilog


def test_quiet_hides_the_progress_bars_of_transformers_too(tmp_path):
    from transformers.utils import logging as transformers_logging

    transformers_logging.enable_progress_bar()
    try:
        assert main(["bench", "--preset", "tiny-omni", "--audio-seconds", "1", "--methods", "frame", "--ratios", "0.5",
                     "--decode-tokens", "1", "--repeats", "1", "--warmup", "0", "--device", "cpu", "--out", str(tmp_path),
                     "--quiet"]) == 0
        assert not transformers_logging.is_progress_bar_enabled()
    finally:
        transformers_logging.enable_progress_bar()
