"""ST-AudioQA (provisional layout) on 4-channel first-order ambisonic fixtures: the omnidirectional W
channel or a virtual stereo pair reaches the model, and the paper's metrics (answer accuracy, yes/no
accuracy, AudioSet-style mAP over predicted label sets, type C's family average) score as worked out
by hand below."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from kvprune.harness.audio import AudioLoadError, resample
from kvprune.harness.sweep.breakdown import breakdown
from kvprune.harness.tasks.prompts import ClipRef
from kvprune.harness.tasks.task import get_task
from tests.support import benchmark_fixtures


@pytest.fixture
def root(tmp_path):
    benchmark_fixtures.staudioqa(tmp_path)
    return tmp_path


def test_the_layout_is_marked_provisional_and_hears_the_w_channel(root):
    task = get_task("staudioqa_a")
    assert (task.data_layout, task.protocol) == ("provisional", "provisional") and "PROVISIONAL" in task.notes
    samples = task.load(root)
    assert [(s.id, s.answer, s.meta["kind"]) for s in samples] == [
        ("a1", "dog bark", "detection"), ("a2", "yes", "verification"), ("a3", "back-right", "answer"),
        ("a4", "clapping; speech", "detection"),
    ]
    waves, prompt = task.render(samples[0]).load(task.channels)
    scene, rate = sf.read(samples[0].audio[0], dtype="float32")
    assert scene.shape[1] == 4 and rate == 32_000
    assert len(waves) == 1 and np.array_equal(waves[0], resample(scene[:, 0], 32_000, 16_000))  # W, not the mean
    assert prompt.segments == (0, "What sound events are present?\nAnswer with a short phrase only; name several sound events separated by \";\".")


def test_a_virtual_stereo_pair_comes_as_two_clips_with_a_legend(root, tmp_path):
    own = tmp_path / "stereo.yaml"
    own.write_text("include: staudioqa_a\nchannels: {policy: foa_stereo, order: acn}\n")
    task = get_task(str(own))
    sample = task.load(root)[0]
    rendered = task.render(sample)
    assert rendered.segments[:3] == (ClipRef(sample.audio[0], 0), ClipRef(sample.audio[0], 1),
                                     "Audio 1 is the left channel and Audio 2 is the right channel.\n")
    waves, _ = rendered.load(task.channels)
    scene, _ = sf.read(sample.audio[0], dtype="float32")
    w, y = scene[:, 0], scene[:, 1]  # ACN: W, Y, Z, X
    assert np.allclose(waves[0], resample(0.5 * (w + y), 32_000, 16_000), atol=1e-6)
    assert np.allclose(waves[1], resample(0.5 * (w - y), 32_000, 16_000), atol=1e-6)


def test_a_file_that_is_not_four_channels_is_that_samples_error(root):
    task = get_task("staudioqa_a")
    sample = task.load(root)[0]
    benchmark_fixtures.write_channels(sample.audio[0], channels=2)
    with pytest.raises(AudioLoadError, match=r"s1\.wav has 2 channel\(s\), but the task's channel policy foa_omni \(acn order\) needs 4: give the task a channels: policy"):
        task.render(sample).load(task.channels)


def test_type_a_metrics(root):
    """a1 "Dog bark; rain" names {dog bark} (rain is no class); a4 "clapping" names {clapping}.
    AP per class over the two detection questions: dog bark 1, clapping 1, speech (never predicted,
    one positive of two: R*P + (1 - R)*prevalence = 0.5) -> mAP 83.33. a2 answers "No." to a yes
    question -> 0; a3 "Back-right." normalises to the gold -> 100."""
    task = get_task("staudioqa_a")
    rows = benchmark_fixtures.rows_of(task, task.load(root), ["Dog bark; rain", "No.", "Back-right.", "clapping"])
    assert task.summarize(rows) == pytest.approx({"st_answer_accuracy": 100.0, "st_yes_no_accuracy": 0.0, "st_event_map": 250 / 3})


def test_type_c_averages_its_three_families(root):
    """Families: temporal relation change right, movement-conditioned spatial relation wrong,
    cross-source trajectory relation right -> Avg. (100 + 0 + 100) / 3."""
    task = get_task("staudioqa_c")
    rows = benchmark_fixtures.rows_of(task, task.load(root), ["No.", "yes", "Yes"])
    assert task.summarize(rows) == pytest.approx({"st_family_average": 200 / 3, "st_answer_accuracy": 200 / 3})
    assert np.isnan(task.summarize(rows[:2])["st_family_average"])  # a family missing: no average


def test_the_table_4_columns_cross_family_and_attribute(root):
    """Items that carry the attribute (DoA or distance) are broken down by family and attribute, as
    the paper's Table 4 columns are; items without it are left out of that table only."""
    items = [json.loads(line) for line in (root / "ST-AudioQA" / "type_a.jsonl").read_text().splitlines()]
    items[2]["attribute"] = "doa"
    items.append(dict(items[2], id="a5", question="What is the distance of the sound at the end?", answer="2.0--2.5 m",
                      attribute="distance"))
    (root / "ST-AudioQA" / "type_a.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    task = get_task("staudioqa_a")
    rows = benchmark_fixtures.rows_of(task, task.load(root), ["dog bark", "yes", "Back-right.", "clapping", "3 m"])
    identity = dict(model="m", task=task.name, method="none", ratio=0.0, layer=None, method_id="none", settings_id="s")
    table = breakdown(pd.DataFrame([dict(row, **identity) for row in rows]), {task.name: task})
    columns = table[table["field"] == "family+attribute"].set_index("value")
    assert dict(columns["samples"]) == {"spatial location / distance": 1, "spatial location / doa": 1}
    assert dict(columns["score"]) == {"spatial location / distance": 0.0, "spatial location / doa": 100.0}
