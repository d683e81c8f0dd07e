"""Channel policies on hand-made multi-channel samples: every clip computed here from the definitions
(ambisonic W is the omnidirectional channel; a virtual cardioid facing left is (W + Y) / 2 in SN3D,
FuMa's W being sqrt(2) lower), and every mismatch between a policy and a file named with its fix."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvprune.harness.audio import AudioLoadError, load_clips
from kvprune.harness.channels import Channels, ChannelError
from tests.support import benchmark_fixtures

# four channels over three frames, each channel its own values
DATA = np.array([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0], [0.0, 0.25, -0.5, 1.0]], dtype=np.float32)


def clips(policy: Channels, data=DATA) -> list[list[float]]:
    return [c.tolist() for c in policy.apply(data, "scene.wav")]


def test_mean_select_and_split():
    assert clips(Channels()) == [[2.5, 0.375, 0.1875]]
    assert clips(Channels("select", select=(1,))) == [[2.0, -1.0, 0.25]]
    assert clips(Channels("select", select=(0, 2))) == [[2.0, 0.25, -0.25]]
    assert clips(Channels("split", count=4)) == [DATA[:, c].tolist() for c in range(4)]
    assert Channels("split", count=4).clips_per_file == 4 and Channels().clips_per_file == 1


def test_first_order_ambisonics_in_acn_and_fuma_order():
    # ACN (AmbiX): W, Y, Z, X. The omni channel is W itself, not the mean of the four.
    assert clips(Channels("foa_omni", order="acn")) == [[1.0, 0.5, 0.0]]
    assert clips(Channels("foa_stereo", order="acn")) == [[1.5, -0.25, 0.125], [-0.5, 0.75, -0.125]]
    # FuMa: W, X, Y, Z, W at -3 dB: W * sqrt(2), and Y is the third channel.
    root2 = math.sqrt(2.0)
    assert clips(Channels("foa_omni", order="fuma"))[0] == pytest.approx([root2, 0.5 * root2, 0.0])
    left, right = clips(Channels("foa_stereo", order="fuma"))
    assert left == pytest.approx([0.5 * (root2 + 3.0), 0.5 * (0.5 * root2), 0.5 * -0.5])
    assert right == pytest.approx([0.5 * (root2 - 3.0), 0.5 * (0.5 * root2), 0.5 * 0.5])


def test_two_clip_policies_have_a_legend():
    assert Channels("split", count=2).legend == "Audio 1 is the left channel and Audio 2 is the right channel.\n"
    assert Channels("foa_stereo", order="acn").legend.startswith("Audio 1 is the left")
    assert Channels("split", count=4).legend == ""
    assert Channels("split", count=2, legend="Left, then right.").legend == "Left, then right."


@pytest.mark.parametrize(("policy", "channels", "problem"), [
    (Channels("foa_omni", order="acn"), 2, r"has 2 channel\(s\), but the task's channel policy foa_omni \(acn order\) needs 4"),
    (Channels("split", count=2), 4, r"has 4 channel\(s\), but the task's channel policy split of 2 channels needs 2"),
    (Channels("select", select=(2,)), 2, r"has 2 channel\(s\), but the task's channel policy selects channel 2 \(0-based\): select channels below 2"),
])
def test_a_policy_that_does_not_fit_the_file_names_the_file_and_the_fix(policy, channels, problem, tmp_path):
    path = benchmark_fixtures.write_channels(tmp_path / "scene.wav", channels, seconds=0.01)
    with pytest.raises(AudioLoadError, match=rf"scene\.wav {problem}"):
        load_clips(path, policy)
    with pytest.raises(ChannelError):
        policy.apply(np.zeros((4, channels), dtype=np.float32), path)


@pytest.mark.parametrize(("value", "problem"), [
    ({"policy": "split", "count": 2, "order": "acn"}, "channel policy split takes no order"),
    ({"policy": "select", "select": []}, "select needs select"),
    ({"policy": "foa_stereo", "order": "ambix"}, "needs order: acn or fuma"),
    ({"policy": "mean", "gain": 2}, r"unknown key\(s\) \['gain'\]"),
    ({"order": "acn"}, "expected a policy name or a mapping"),
])
def test_malformed_policies_are_refused(value, problem):
    with pytest.raises(ValueError, match=problem):
        Channels.from_config(value)


def test_files_are_read_per_policy_and_resampled(tmp_path):
    path = benchmark_fixtures.write_channels(tmp_path / "scene.wav", 4, seconds=0.5, rate=32_000)
    omni, = load_clips(path, Channels("foa_omni", order="acn"))
    pair = load_clips(path, Channels("foa_stereo", order="acn"))
    assert len(omni) == 8000 and [len(c) for c in pair] == [8000, 8000]
