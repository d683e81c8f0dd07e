"""Each model family spoken to as itself: AudioMarathon's protocol is its Qwen2.5-Omni scripts', whose
system turn tells the model it is Qwen; a model of any other family that AudioMarathon has no script
of its own for (Phi-4-MM's ASR, Voxtral's gender task, every task of Qwen2-Audio, Qwen3-Omni, Audio
Flamingo 3, Granite Speech, Gemma-3n) gets the protocol's text in its own family's defaults: no
system turn of Qwen's. Checked on what reaches each family's processor (the conversation handed to
its chat template, through the family's own build_inputs), for every AudioMarathon task under every
protocol it offers, and on the resolved config of every registered task."""

from __future__ import annotations

import pytest

from kvprune.harness.tasks.protocols import WRITTEN_FOR
from kvprune.harness.tasks.suites import get_suite
from kvprune.harness.tasks.task import get_task, list_tasks
from kvprune.models import FAMILIES
from tests.support import task_fixtures
from tests.support.tiny_processors import processor_and_config

QWEN = "Qwen"  # "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, ..."
OWN = WRITTEN_FOR["audiomarathon"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return task_fixtures.every_task(tmp_path_factory.mktemp("audiomarathon"))


def texts(conversation: list[dict]) -> list[str]:
    """The text of every turn (the audio items' waveforms left out: base64 can spell anything)."""
    return [part if isinstance(part, str) else part.get("text") or "" for message in conversation
            for part in ([message["content"]] if isinstance(message["content"], str) else message["content"])]


@pytest.mark.parametrize("family", FAMILIES.names())
def test_only_the_scripts_own_model_is_told_it_is_qwen(family, data_root, tmp_path, monkeypatch):
    processor, _ = processor_and_config(family, tmp_path)
    sent: list[list[dict]] = []
    chat_template = processor.apply_chat_template
    monkeypatch.setattr(processor, "apply_chat_template", lambda conversation, **kwargs: (
        sent.append(conversation), chat_template(conversation, **kwargs))[1])
    build_inputs = FAMILIES.get(family).prompting.build_inputs
    systems = {}
    for name in get_suite("audiomarathon").tasks:
        task = get_task(name)
        for protocol in [task.protocol, *task.protocols]:
            resolved = task.under(protocol, family)
            waves, prompt = resolved.render(resolved.load(data_root)[0]).load(resolved.channels)
            build_inputs(processor, waves, prompt)
            systems[resolved.name] = prompt.system
    said = [text for conversation in sent for text in texts(conversation)]
    assert said, "nothing reached the chat template"
    if family == OWN:  # the scripts' persona reaches the model they were written for
        assert sum(QWEN in text for text in said) == 8  # eight of the ten Qwen scripts open with it (not DESED, HAD)
        assert systems["desed@audiomarathon"].startswith("You are a helpful assistant that analyzes audio")
    else:
        assert not [text for text in said if QWEN in text]
        assert set(systems.values()) == {None}  # every task, every protocol: the family's own default, no system turn


@pytest.mark.parametrize("family", [None, *FAMILIES.names()])
def test_no_resolved_task_holds_qwens_identity_for_another_family(family):
    """Every registered task under every protocol it offers, in every family's form."""
    for name in list_tasks():
        task = get_task(name)
        for protocol in [task.protocol, *task.protocols]:
            config = task.under(protocol, family).config
            told = [key for key in ("system", "prompt") if QWEN in str(config.get(key, ""))]
            assert not told or family in (None, OWN), (name, protocol, family, told)


@pytest.mark.parametrize(("task", "family"), [("librispeech", "phi4_multimodal"), ("vox_gender", "voxtral"),
                                              ("gtzan", "qwen2_audio"), ("desed", "gemma3n"), ("race", "qwen3_omni")])
def test_without_a_script_a_family_runs_the_protocols_text_in_its_own_form(task, family):
    """The protocol's prompt, parser, metrics and lengths; the family's own system turn (none); a name
    of its own, so that its results never mix with the Qwen2.5-Omni form's."""
    resolved = get_task(task).under("audiomarathon", family)
    protocol = get_task(task).under("audiomarathon").config
    assert resolved.name == f"{task}@audiomarathon:{family}" and resolved.config["family"] == family
    assert protocol.get("system") and "system" not in resolved.config
    assert {k: v for k, v in resolved.config.items() if k not in ("name", "family")} == {
        k: v for k, v in protocol.items() if k not in ("name", "system")}
