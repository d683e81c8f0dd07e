"""The score-vs-prefill figure stays readable when points tie: its ratio labels never cover each
other or a panel's title, and stay inside their panel; the plotting modules leave the backend alone."""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd
import pytest

from kvprune.harness.sweep import plots
from tests.support.paths import REPO

DEMO_SUMMARY = REPO / "docs" / "demo" / "summary.csv"


def _label_boxes(summary: pd.DataFrame, out: Path, monkeypatch) -> list[tuple]:
    """Per panel of the score-vs-prefill figure: its frame, its title's box and its labels' boxes (in
    pixels, as drawn)."""
    panels = []
    save = plots._save

    def keep(fig, path, legend):
        if Path(path).name.endswith("_score_vs_prefill.png"):
            renderer = fig.canvas.get_renderer()
            for ax in fig.axes:
                panels.append((ax.get_window_extent(renderer), ax.title.get_window_extent(renderer),
                               [text.get_window_extent(renderer) for text in ax.texts]))
        save(fig, path, legend)

    monkeypatch.setattr(plots, "_save", keep)
    plots.plot_summary(summary, out)
    return panels


@pytest.mark.parametrize("tied", [False, True], ids=["demo", "every-point-tied"])
def test_ratio_labels_of_tied_points_neither_pile_up_nor_cover_the_titles(tmp_path, monkeypatch, tied):
    summary = pd.read_csv(DEMO_SUMMARY)
    if tied:  # every method at every ratio on one point
        summary["score"], summary["prefill_ms_median"] = 100.0, 12.0
    panels = _label_boxes(summary, tmp_path, monkeypatch)
    assert len(panels) == summary["task"].nunique() + 1  # the tasks and their average
    for frame, title, boxes in panels:
        assert boxes, "every panel keeps at least one label"
        assert len(boxes) == 1 or not tied, "one label per panel where every point is the same point"
        for i, box in enumerate(boxes):
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            assert not box.overlaps(title)
            assert not any(box.overlaps(other) for other in boxes[i + 1:]), "labels overlap"


def test_importing_the_plotting_modules_leaves_the_backend_to_the_user():
    import matplotlib

    from kvprune.harness.bench import figures, report
    from kvprune.harness.sweep import analyses

    before = matplotlib.get_backend()
    try:
        matplotlib.use("svg")  # a backend of the user's: the modules' top level, run again, keeps it
        importlib.reload(plots)
        importlib.reload(figures)
        importlib.reload(report)
        importlib.reload(analyses)
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)
