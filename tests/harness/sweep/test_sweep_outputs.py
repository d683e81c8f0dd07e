"""What a person reads: the headline, the task average over the tasks every method ran, the timing
noise, and the figures (opened as images: one legend entry per method, tied methods all visible).

Results are made up here so that the numbers are known: on two tasks, methods alpha and beta give
the same answers (their curves tie), gamma ran on one task only, and the timings are set per
sample (alpha and beta clearly faster than the unpruned run, gamma not)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from kvprune.harness.sweep.headline import headline_markdown, headline_text
from kvprune.harness.sweep.plots import plot_summary
from kvprune.harness.sweep.summary import summarize, task_averages
from kvprune.harness.tasks.task import get_task

SAMPLES = 8
REFERENCES = ["A", "B"] * (SAMPLES // 2)
RIGHT = {("none", 0.0): 8, ("alpha", 0.3): 6, ("alpha", 0.6): 4, ("beta", 0.3): 6, ("beta", 0.6): 4, ("gamma", 0.3): 2, ("gamma", 0.6): 2}
PREFILL = {"none": 0.030, "alpha": 0.020, "beta": 0.020, "gamma": 0.030}


def results() -> pd.DataFrame:
    rows = []
    for task in ("had", "gtzan"):
        for (method, ratio), right in RIGHT.items():
            if method == "gamma" and task == "gtzan":
                continue
            for i, reference in enumerate(REFERENCES):
                parsed = reference if i < right else ("B" if reference == "A" else "A")
                jitter = 1 + 0.01 * ((i * 7 + len(method)) % 5 - 2)  # per-sample timing noise, +-2%
                rows.append(dict(
                    model="m", task=task, method=method, ratio=ratio, layer=None if method == "none" else 2,
                    method_id=method, settings_id="s", sample_id=f"s{i}", input_hash="h", item=f"s{i}", parsed=parsed,
                    reference=reference, correct=float(parsed == reference), error=None, warmup=False, audio_seconds=2.0,
                    audio_tokens=50, kept_tokens=round(50 * (1 - ratio)), prefill_s=PREFILL[method] * jitter, decode_s=0.01, new_tokens=2,
                    decode_tokens_per_s=100.0, peak_memory_bytes=None, kv_cache_bytes=1000,
                ))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    return summarize(results(), {name: get_task(name) for name in ("had", "gtzan")})


def test_speedups_say_whether_they_stand_out_of_the_noise(summary):
    rows = summary.set_index(["task", "method", "ratio"])
    assert rows.loc[("had", "alpha", 0.3), "prefill_speedup"] == pytest.approx(1.5, rel=0.03)
    assert not rows.loc[("had", "alpha", 0.3), "prefill_within_noise"]
    assert rows.loc[("had", "gamma", 0.3), "prefill_within_noise"], "gamma's timings straddle the unpruned run's"
    assert pd.isna(rows.loc[("had", "none", 0.0), "prefill_within_noise"])


def test_the_headline_gives_each_task_its_baseline_and_each_method_its_score_and_speedup(summary):
    text = headline_text(summary)
    assert "had (f1_macro, higher is better; 8 samples): unpruned 100.0" in text
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("had ")))
    alpha = lines[start + 2].split()
    assert alpha[:2] == ["alpha", "score"] and len(alpha) == 4
    assert lines[start + 3].split()[0] == "prefill" and lines[start + 3].split()[1].endswith("×")
    gamma_prefill = lines[start + 7].split()
    assert all(cell.endswith("×~") for cell in gamma_prefill[1:]), "gamma's speedups are marked as noise"
    assert "~: within timing noise" in text
    markdown = headline_markdown(summary)
    assert "| method | ratio 0.3 | ratio 0.6 |" in markdown and "| gamma |" in markdown


def test_the_task_average_covers_the_tasks_every_method_ran(summary):
    ((title, rows),) = task_averages(summary)
    assert title == "Average over the task every method ran (gtzan left out: not every method ran it)"
    assert set(rows["tasks"]) == {1}
    had = summary[summary["task"] == "had"].set_index(["method", "ratio"])["score"]
    assert dict(zip(zip(rows["method"], rows["ratio"]), rows["score"])) == had.to_dict()


def _legend(path) -> list[str]:
    with Image.open(path) as image:
        return json.loads(image.text["Legend"])


def _pixels_of(path, rgb) -> int:
    """Pixels within a small distance of a colour."""
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=int)
    return int((np.abs(pixels - np.array(rgb)).sum(axis=-1) < 40).sum())


def test_figures_have_one_legend_entry_per_method_and_tied_methods_stay_visible(summary, tmp_path):
    import matplotlib.pyplot as plt

    ratio_png, prefill_png, kv_png = plot_summary(summary, tmp_path)
    assert (ratio_png.name, prefill_png.name, kv_png.name) == ("m_score_vs_ratio.png", "m_score_vs_prefill.png", "m_kv_saved.png")
    ratio_legend, prefill_legend = _legend(ratio_png), _legend(prefill_png)
    assert sorted(ratio_legend) == ["alpha", "beta", "gamma", "unpruned"], "gamma ran on one task only: it is listed once"
    assert sorted(prefill_legend) == ["Pareto front", "alpha", "beta", "gamma", "unpruned"]
    assert _legend(kv_png) == ["alpha", "beta", "gamma"]
    with Image.open(ratio_png) as image:
        assert image.size[0] > 800 and image.size[1] > 300
    colours = {method: [round(255 * c) for c in plt.get_cmap("tab10")(i)[:3]] for i, method in enumerate(["alpha", "beta", "gamma"])}
    for method, rgb in colours.items():  # far more than the legend's swatch: the curves themselves show
        assert _pixels_of(ratio_png, rgb) > 300, method
        assert _pixels_of(kv_png, rgb) > 300, f"{method}: every method saves 0% here, and each line still shows"
