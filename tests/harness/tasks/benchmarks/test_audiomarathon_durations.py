"""Every AudioMarathon task's score against duration buckets durations as its own
``src/analyse_audio_duration`` script does (DabDans/AudioMarathon at c8f49f3), the suite's view of
the ten tasks together as ``analyse_all.py`` does. The scripts' counting code is transcribed below,
edges and labels copied from each script, and asked about durations at, just under and just over
every edge, and beyond both ends; kvprune's buckets must put each duration where the script counts
it (or nowhere, where the script counts it nowhere)."""

from __future__ import annotations

import math

import pytest

from kvprune.harness.tasks.suites import get_suite
from kvprune.harness.tasks.task import get_task

INF = float("inf")


def distribution(bins, bin_labels):
    """``get_duration_distribution`` (DESED, GTZAN, LibriSpeech, VESUS, analyse_all) and HAD.py's
    inline copy: the labels whose count includes ``d``."""
    def counted(d):
        hits = []
        for start, end, label in zip(bins[:-1], bins[1:], bin_labels):
            if end == float("inf"):
                if d >= start:
                    hits.append(label)
            elif start <= d < end:
                hits.append(label)
        return hits
    return bins, counted


def duration_ranges(ranges):
    """TAU.py's and Vox_gender.py's ``print_..._statistics_report``: ``min_dur <= d < max_dur``."""
    return [low for low, _, _ in ranges] + [ranges[-1][1]], lambda d: [label for low, high, label in ranges if low <= d < high]


def race(d):
    """race.py ``analyze_duration_distribution``."""
    distribution = {
        "< 30 seconds": d < 30,
        "30 seconds - 1 minute": 30 <= d < 60,
        "1-2 minutes": 60 <= d < 120,
        "2-3 minutes": 120 <= d < 180,
        "3-5 minutes": 180 <= d < 300,
        "5-10 minutes": 300 <= d < 600,
        "> 10 minutes": d >= 600,
    }
    return [name for name, counted in distribution.items() if counted]


def slue(duration):
    """SLUE.py ``categorize_duration``."""
    if duration < 1:
        return ["0-1s"]
    elif duration < 5:
        return ["1-5s"]
    elif duration < 10:
        return ["5-10s"]
    elif duration < 30:
        return ["10-30s"]
    elif duration < 60:
        return ["30-60s"]
    elif duration < 120:
        return ["1-2min"]
    elif duration < 300:
        return ["2-5min"]
    elif duration < 600:
        return ["5-10min"]
    elif duration < 1800:
        return ["10-30min"]
    else:
        return ["30min+"]


ANALYSE_ALL = distribution([0, 2, 5, 10, 15, 20, 25, 30, 35, 45, 60, 90, 120, 180, 300, 600, float("inf")], [
    "0-2s", "2-5s", "5-10s", "10-15s", "15-20s", "20-25s", "25-30s", "30-35s", "35-45s", "45-60s", "1-1.5min",
    "1.5-2min", "2-3min", "3-5min", "5-10min", "10min+"])
SCRIPTS = {  # kvprune's task -> (the script's edges, the labels whose count includes a duration)
    "desed": distribution([0, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, float("inf")], [
        "0-5s", "5-10s", "10-15s", "15-20s", "20-30s", "30-45s", "45-60s", "1-1.5min", "1.5-2min", "2-3min", "3-5min",
        "5-10min", "10+min"]),
    "gtzan": distribution([0, 10, 20, 25, 28, 30, 32, 35, 40, 45, 60, 90, 120, 180, float("inf")], [
        "0-10s", "10-20s", "20-25s", "25-28s", "28-30s", "30-32s", "32-35s", "35-40s", "40-45s", "45-60s", "1-1.5min",
        "1.5-2min", "2-3min", "3min+"]),
    "had": distribution([0, 10, 30, 60, 120, 300, 600, float("inf")],
                        ["0-10s", "10-30s", "30-60s", "1-2min", "2-5min", "5-10min", "10min+"]),
    "librispeech": distribution([0, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, float("inf")], [
        "0-2s", "2-5s", "5-10s", "10-15s", "15-20s", "20-30s", "30-45s", "45-60s", "1-1.5min", "1.5-2min", "2-3min",
        "3-5min", "5min+"]),
    "race": ([30, 60, 120, 180, 300, 600], race),
    "slue": ([1, 5, 10, 30, 60, 120, 300, 600, 1800], slue),
    "tau": duration_ranges([(0, 10, "0-10 seconds"), (10, 30, "10-30 seconds"), (30, 60, "30-60 seconds"),
                            (60, 120, "1-2 minutes"), (120, 300, "2-5 minutes"), (300, 600, "5-10 minutes"),
                            (600, float("inf"), "10+ minutes")]),
    "vesus": distribution([0, 1, 2, 3, 5, 8, 10, 15, 20, 30, 45, 60, 90, 120, float("inf")], [
        "0-1s", "1-2s", "2-3s", "3-5s", "5-8s", "8-10s", "10-15s", "15-20s", "20-30s", "30-45s", "45-60s", "1-1.5min",
        "1.5-2min", ">2min"]),
    "vox_gender": duration_ranges([(0, 5, "0-5 seconds"), (5, 10, "5-10 seconds"), (10, 30, "10-30 seconds"),
                                   (30, 60, "30-60 seconds"), (60, 120, "1-2 minutes"), (120, 300, "2-5 minutes"),
                                   (300, 600, "5-10 minutes"), (600, float("inf"), "10+ minutes")]),
    "vox_age": ANALYSE_ALL,  # Vox_age.py buckets nothing; analyse_all.py counts its durations with the others'
}


def probes(edges) -> list[float]:
    """Durations at, just under and just over every finite edge, between edges, and beyond both ends."""
    finite = sorted(e for e in edges if math.isfinite(e))
    around = [x for e in finite for x in (math.nextafter(e, -INF), e, math.nextafter(e, INF), e - 0.01, e + 0.01)]
    between = [(a + b) / 2 for a, b in zip(finite, finite[1:])]
    return [-INF, -5.0, -1e-9, 0.0, *around, *between, finite[-1] * 3, 1e9, INF]


def assert_buckets_as(buckets, counted, edges):
    for seconds in probes(edges):
        hits = counted(seconds)
        assert len(hits) <= 1, f"{seconds}: the script counts it in {hits}"
        assert buckets.assign(seconds) == (hits[0] if hits else None), seconds


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_task_buckets_durations_as_its_script(name):
    edges, counted = SCRIPTS[name]
    task = get_task(name)
    assert_buckets_as(task.duration_buckets, counted, edges)
    for family in (None, "phi4_multimodal", "aero", "voxtral", "gemma3n"):  # every form of the task: the same buckets
        assert task.under("audiomarathon", family).duration_buckets == task.duration_buckets


def test_the_suites_view_and_every_other_task_bucket_as_analyse_all():
    edges, counted = ANALYSE_ALL
    assert_buckets_as(get_suite("audiomarathon").duration_buckets, counted, edges)
    for name in ("mmau", "starbench_pc", "demo_pitch"):
        assert_buckets_as(get_task(name).duration_buckets, counted, edges)
    assert get_suite("starbench").duration_buckets is None  # no benchmark but AudioMarathon buckets its tasks together


def test_the_buckets_are_in_the_scripts_order_and_an_unknown_duration_in_none():
    """An unreadable file is in no count of the scripts (they list it as failed); an unknown duration
    here. SLUE's if-chain would put a NaN in "30min+": no duration is not a long one."""
    for name, (edges, counted) in SCRIPTS.items():
        buckets = get_task(name).duration_buckets
        assert buckets.assign(float("nan")) is None and buckets.assign(None) is None
        labels = [hit for seconds in probes(edges) for hit in counted(seconds)]
        assert list(buckets.labels) == list(dict.fromkeys(labels)), name  # every label, shortest first
        assert [buckets.order(label) for label in buckets.labels] == list(range(len(buckets.labels)))
