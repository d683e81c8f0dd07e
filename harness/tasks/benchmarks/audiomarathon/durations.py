"""AudioMarathon's audio-duration buckets, as its ``src/analyse_audio_duration`` scripts count them
(DabDans/AudioMarathon at c8f49f3): each task's script has its own edges, labels and boundary rule,
and ``analyse_all.py`` its own for the ten tasks' durations together.

Three rules occur. The ``get_duration_distribution`` loops (DESED, GTZAN, LibriSpeech, VESUS,
analyse_all; HAD's inline copy) count ``start <= d < end`` per bucket and ``d >= start`` for the
last, whose end is ``float('inf')``. TAU's and Vox_gender's ``duration_ranges`` count
``min_dur <= d < max_dur`` for every bucket, the last one's ``max_dur`` ``float('inf')`` too (an
infinite duration is in no bucket). race's ``analyze_duration_distribution`` and SLUE's
``categorize_duration`` open the first bucket below (``d < 30``, ``duration < 1``: a negative
duration is in it; its lower edge is -inf here) and close nothing above. The other scripts put a
negative duration in no bucket. A duration the scripts cannot read is in no bucket (they list its
file as failed); so is an unknown one here. Vox_age.py buckets nothing (percentiles and 50-bin
histograms only): its task is counted in analyse_all's buckets, where that script counts its
durations.
"""

from __future__ import annotations

from ....scoring.durations import DEFAULT, INF, BenchmarkBuckets, DurationBuckets

BUCKETS = {
    buckets.script: buckets
    for buckets in (
        DurationBuckets("DESED", (0, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, INF), (
            "0-5s", "5-10s", "10-15s", "15-20s", "20-30s", "30-45s", "45-60s", "1-1.5min", "1.5-2min", "2-3min", "3-5min",
            "5-10min", "10+min")),
        DurationBuckets("GTZAN", (0, 10, 20, 25, 28, 30, 32, 35, 40, 45, 60, 90, 120, 180, INF), (
            "0-10s", "10-20s", "20-25s", "25-28s", "28-30s", "30-32s", "32-35s", "35-40s", "40-45s", "45-60s", "1-1.5min",
            "1.5-2min", "2-3min", "3min+")),
        DurationBuckets("HAD", (0, 10, 30, 60, 120, 300, 600, INF), (
            "0-10s", "10-30s", "30-60s", "1-2min", "2-5min", "5-10min", "10min+")),
        DurationBuckets("LibriSpeech", (0, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, INF), (
            "0-2s", "2-5s", "5-10s", "10-15s", "15-20s", "20-30s", "30-45s", "45-60s", "1-1.5min", "1.5-2min", "2-3min",
            "3-5min", "5min+")),
        DurationBuckets("race", (-INF, 30, 60, 120, 180, 300, 600, INF), (
            "< 30 seconds", "30 seconds - 1 minute", "1-2 minutes", "2-3 minutes", "3-5 minutes", "5-10 minutes",
            "> 10 minutes")),
        DurationBuckets("SLUE", (-INF, 1, 5, 10, 30, 60, 120, 300, 600, 1800, INF), (
            "0-1s", "1-5s", "5-10s", "10-30s", "30-60s", "1-2min", "2-5min", "5-10min", "10-30min", "30min+")),
        DurationBuckets("TAU", (0, 10, 30, 60, 120, 300, 600, INF), (
            "0-10 seconds", "10-30 seconds", "30-60 seconds", "1-2 minutes", "2-5 minutes", "5-10 minutes", "10+ minutes"),
            inf_in_last=False),
        DurationBuckets("VESUS", (0, 1, 2, 3, 5, 8, 10, 15, 20, 30, 45, 60, 90, 120, INF), (
            "0-1s", "1-2s", "2-3s", "3-5s", "5-8s", "8-10s", "10-15s", "15-20s", "20-30s", "30-45s", "45-60s", "1-1.5min",
            "1.5-2min", ">2min")),
        DurationBuckets("Vox_gender", (0, 5, 10, 30, 60, 120, 300, 600, INF), (
            "0-5 seconds", "5-10 seconds", "10-30 seconds", "30-60 seconds", "1-2 minutes", "2-5 minutes", "5-10 minutes",
            "10+ minutes"), inf_in_last=False),
        DEFAULT,  # analyse_all's
    )
}

BENCHMARK = "AudioMarathon"
ALL_TASKS = "analyse_all"  # the script that buckets the ten tasks' durations together
#: AudioMarathon's tasks, by its leaderboard's abbreviations -> the script that buckets their durations
TASK_SCRIPTS = {"SED": "DESED", "MC": "GTZAN", "SD": "HAD", "ASR": "LibriSpeech", "SCR": "race", "SER": "SLUE",
                "ASC": "TAU", "ER": "VESUS", "SGR": "Vox_gender", "SAR": ALL_TASKS}

#: what the harness counts each task in (``scoring.durations``: registered by this benchmark's metrics module)
DURATIONS = BenchmarkBuckets({task: BUCKETS[script] for task, script in TASK_SCRIPTS.items()}, together=BUCKETS[ALL_TASKS])
