"""scripts/profile_decode_step.py on the tiny preset on the CPU (the GPU run is the same code, kernels instead of
aten operators): the difference of two decode lengths leaves exactly one step's calls."""

from __future__ import annotations

import json

import pytest

from kvprune.generation import dependent_launch
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.bench.step_cases import parse_cases
from tests.support.paths import load_script

pytestmark = pytest.mark.usefixtures("one_thread")


def test_each_case_gets_one_steps_operators_and_a_table(tmp_path, monkeypatch):
    script = load_script("profile_decode_step", monkeypatch)
    monkeypatch.setattr(dependent_launch, "ENABLED", dependent_launch.ENABLED)  # the script sets it for its process
    results = script.main(["--tiny", "--methods", "fastv,none", "--batch-sizes", "2", "--seconds", "2", "--short", "2",
                           "--long", "5", "--out", str(tmp_path)])
    layers = PRESETS.get("tiny-omni").config().get_text_config().num_hidden_layers
    assert [(r["method"], r["rows"]) for r in results] == [("fastv", 2), ("none", 2)]
    for result in results:  # q, k, v, o, gate, up and down per layer, then the head: once per step, not per call
        assert result["kernels"]["aten::linear"]["calls"] == 7 * layers + 1
        assert result["step_ms"] > 0
        assert "aten::linear" in (tmp_path / f"profile_{result['method']}_{result['rows']}.md").read_text()
    assert json.loads((tmp_path / "profile.json").read_text())["cases"][1]["method"] == "none"


def test_methods_are_the_bench_s_with_commas_inside_a_press_and_none_where_it_stands():
    cases = parse_cases("snapkv:window=32,kernel=7, none ,frame+knorm", "2,1", 0.5)
    assert [(label, rows) for label, _, rows in cases] == [("snapkv:window=32,kernel=7", 2), ("snapkv:window=32,kernel=7", 1),
                                                           ("none", 2), ("none", 1), ("frame+knorm", 2), ("frame+knorm", 1)]
    assert cases[2][1] is None and cases[0][1].window == 32 and cases[0][1].ratio == 0.5


@pytest.mark.parametrize("argv, problem", [(["--methods", "fastvv"], "unknown press 'fastvv'"),
                                           (["--batch-sizes", "0"], "positive whole numbers"),
                                           (["--batch-sizes", "a"], "positive whole numbers"),
                                           (["--short", "9", "--long", "9"], "--long")])
def test_bad_arguments_say_what_to_write(tmp_path, monkeypatch, argv, problem):
    script = load_script("profile_decode_step", monkeypatch)
    with pytest.raises(SystemExit, match=problem):
        script.main(["--tiny", "--out", str(tmp_path), *argv])
