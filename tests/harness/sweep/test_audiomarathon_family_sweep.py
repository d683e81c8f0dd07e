"""Sweeps under --protocol audiomarathon on tiny checkpoints of the families AudioMarathon has scripts
for (Phi-4-MM and Voxtral with their stock processors, Aero-1's stand-in with its substitute
processor): every task runs in its family's form, without an error row, and the folder records the
family's conventions; models of two families in one sweep each run their own form of a task, and
rerunning the command finds nothing left to run."""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers.models.auto import configuration_auto, modeling_auto

from kvprune.harness.cli import main
from kvprune.harness.sweep.identity import read_plan
from kvprune.harness.sweep.store import read_log, recorded_tasks
from kvprune.harness.tasks.suites import get_suite
from kvprune.harness.tasks.task import get_task
from kvprune.models import FAMILIES
from kvprune.models.aero import AeroConfig, AeroForConditionalGeneration
from tests.support import task_fixtures
from tests.support.tiny_checkpoints import checkpoint
from tests.support.tiny_processors import processor_and_config
from tests.support.results import result_lines

TASKS = get_suite("audiomarathon").tasks


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return task_fixtures.every_task(tmp_path_factory.mktemp("audiomarathon"))


def tiny_model(family: str, folder, monkeypatch) -> str:
    """A tiny checkpoint of ``family`` in ``folder``. Aero-1 is remote code: its stand-in classes are
    registered with the Auto classes and its processor substitute is what AutoProcessor gives, for
    this test only."""
    folder.mkdir()
    if family != "aero":
        return str(checkpoint(family, folder))
    processor, config = processor_and_config("aero", folder)
    monkeypatch.setitem(configuration_auto.CONFIG_MAPPING._extra_content, "aero", AeroConfig)
    monkeypatch.setitem(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING._extra_content, AeroConfig, AeroForConditionalGeneration)
    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", lambda *args, **kwargs: processor)
    torch.manual_seed(0)
    FAMILIES.get("aero").build(config).save_pretrained(folder)
    return str(folder)


def sweep(models: str, tasks: str, data_root, out) -> int:
    return main(["sweep", "--model", models, "--tasks", tasks, "--protocol", "audiomarathon", "--methods", "frame,fastv",
                 "--ratios", "0.5", "--data-root", str(data_root), "--out", str(out), "--device", "cpu", "--quiet",
                 "--max-new-tokens", "2", "--limit", "1", "--timing-samples", "0"])


@pytest.mark.parametrize("family", ["phi4_multimodal", "aero", "voxtral"])
def test_every_task_runs_in_the_familys_form(family, data_root, tmp_path, monkeypatch):
    model = tiny_model(family, tmp_path / family, monkeypatch)
    out = tmp_path / "out"
    assert sweep(model, "audiomarathon", data_root, out) == 0
    rows = result_lines(out)
    assert rows and [r["error"] for r in rows] == [None] * len(rows)
    expected = [get_task(name).under("audiomarathon", family) for name in TASKS]
    assert {r["task"] for r in rows} == {task.name for task in expected}
    assert {r["family"] for r in rows} == {family}
    [run] = read_log(out)
    assert run["family"] == family and run["tasks"] == {task.name: task.config for task in expected}
    assert all(config.get("family") == family for config in run["tasks"].values())  # a task without its script too
    recorded = recorded_tasks(out)  # the family's extractor read every reply
    samples = {name: {s.id: s for s in task.load(data_root)} for name, task in recorded.items()}
    for row in rows:
        task = recorded[row["task"]]
        assert row["parsed"] == task.parse(row["output"], samples[row["task"]][row["sample_id"]])


def test_models_of_two_families_each_run_their_own_form(data_root, tmp_path):
    phi4 = checkpoint("phi4_multimodal", tmp_path / "phi4")
    out = tmp_path / "out"
    assert sweep(f"demo,{phi4}", "gtzan,librispeech", data_root, out) == 0
    rows = result_lines(out)
    assert {(r["model"] == "demo", r["task"]) for r in rows} == {
        (True, "gtzan@audiomarathon"), (True, "librispeech@audiomarathon"),  # Qwen2.5-Omni: the protocol's own scripts
        (False, "gtzan@audiomarathon:phi4_multimodal"),
        (False, "librispeech@audiomarathon:phi4_multimodal"),  # no Phi-4 ASR script: the protocol's text, Phi-4's defaults
    }
    plan = read_plan(out)
    assert set(plan.settings_ids["demo"]) == {"gtzan@audiomarathon", "librispeech@audiomarathon"}
    assert set(plan.settings_ids[str(phi4)]) == {"gtzan@audiomarathon:phi4_multimodal", "librispeech@audiomarathon:phi4_multimodal"}
    assert plan.gaps((r["model"], r["task"]) for r in rows) == {}  # each model is planned for its own tasks only
    phi4_run = next(run for run in read_log(out) if run["family"] == "phi4_multimodal")
    assert "system" not in phi4_run["tasks"]["librispeech@audiomarathon:phi4_multimodal"]
    written = len(rows)
    assert sweep(f"demo,{phi4}", "gtzan,librispeech", data_root, out) == 0
    assert len(result_lines(out)) == written  # resumed: nothing left to run
