"""Accuracy against pruning ratio and against prefill latency, per task and averaged over tasks; KV
cache saved against pruning ratio, per method.

Every method stays visible when methods tie: each has its own colour, marker and line style, lines
drawn first are wider (a tied later line shows inside an earlier one), and in the figures against
ratio each method's points are shifted sideways by a hair. Each method's score line starts at ratio
0 from the unpruned score. Each figure has one legend, for all of its panels (its labels are also
stored in the PNG's ``Legend`` text field, for tools and tests). Panels say how many samples each
point averages; the task average covers only the tasks every method ran. In the score-vs-prefill
figure points are labelled with their ratio where a label fits (inside the panel, clear of the other
labels: each method's highest and lowest ratio first, tied points one label), horizontal bars span
the middle half of the per-sample prefill times, and the figure says so when the timings are within
noise.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from .config import BASELINE
from .headline import noise_share, ratio_text
from .summary import direction, task_averages

MARKERS = "osD^vPX*<>"
LINESTYLES = ("-", "--", "-.", ":")
OFFSET = 0.008  # sideways shift between methods in the score-vs-ratio figure, in ratio units
UNPRUNED = "unpruned"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(text)).name or str(text)).strip("_")


def plot_summary(summary: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Write the three figures per model; returns the PNG paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for model, frame in summary.groupby("model"):
        panels = _panels(frame)
        styles = _styles(frame)
        noisy = noise_share(frame) >= 0.5
        paths.append(_figure(panels, model, out_dir / f"{slug(model)}_score_vs_ratio.png", _score_vs_ratio, styles))
        note = "timings are within noise: prefill differences here are not measurable" if noisy else None
        paths.append(_figure(panels, model, out_dir / f"{slug(model)}_score_vs_prefill.png", _score_vs_prefill, styles, note))
        paths.append(plot_kv_saved(frame, model, out_dir / f"{slug(model)}_kv_saved.png", styles))
    return paths


def _styles(frame: pd.DataFrame) -> dict[str, dict]:
    """Colour, marker, line style, width and sideways offset of each method, the same in every
    panel; methods are drawn in this order, the first widest."""
    methods = sorted(m for m in frame["method"].unique() if m != BASELINE)
    middle, last = (len(methods) - 1) / 2, max(len(methods) - 1, 1)
    return {
        method: dict(color=plt.get_cmap("tab10")(i % 10), marker=MARKERS[i % len(MARKERS)],
                     linestyle=LINESTYLES[i % len(LINESTYLES)], offset=(i - middle) * OFFSET,
                     width=1.2 + 2.0 * (last - i) / last, size=4 + 4 * (last - i) / last)
        for i, method in enumerate(methods)
    }


def _panels(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, y label, rows) per task, then the average over the tasks every method ran (one per
    metric direction)."""
    panels = []
    for task, rows in frame.groupby("task"):
        samples = rows["samples"].max()
        ylabel = f"{rows['metric'].iloc[0]} ({direction(rows['higher_is_better'].iloc[0])})"
        panels.append((f"{task} ({samples:.0f} samples per point)", ylabel, rows))
    if len(panels) > 1:
        for title, rows in task_averages(frame):
            if rows["tasks"].max() > 1:
                panels.append((_wrap(title), "mean primary score", rows))
    return panels


def _wrap(title: str, width: int = 48) -> str:
    words, lines = title.split(), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + len(word) + 1 > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {word}".strip()
    return "\n".join(lines)


def _figure(panels, model, path: Path, draw, styles: dict, note: str | None = None) -> Path:
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.9 * rows), squeeze=False)
    labels = {}
    for ax, (title, ylabel, frame) in zip(axes.flat, panels):
        labels[ax] = draw(ax, frame, styles) or []
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_ylim(min(0.0, frame["score"].min() - 2), max(102.0, frame["score"].max() + 2))  # the whole 0-100 scale
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.remove()
    legend = _legend_entries(fig, order=list(styles))
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=min(len(legend), 6), frameon=False)
    fig.suptitle(Path(str(model)).name + (f"\n{note}" if note else ""))
    fig.tight_layout(rect=(0, 0.06 + 0.03 * (len(legend) > 6), 1, 0.94 if note else 0.96))
    for ax, candidates in labels.items():
        place_labels(ax, candidates)
    _save(fig, path, legend)
    return path


def place_labels(ax, candidates: list[tuple[float, float, str, object]]) -> list:
    """Label points ``(x, y, text, colour)`` in the order given, each inside the axes and clear of
    the labels already placed: a label that would leave the axes or cover another is left out (tied
    points share one label, and none covers a panel's title). Returns the labels placed."""
    renderer = getattr(ax.figure.canvas, "get_renderer", lambda: None)()
    frame = ax.get_window_extent(renderer) if renderer is not None else None
    placed, boxes = [], []
    for x, y, text, colour in candidates:
        label = ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7, color=colour,
                            annotation_clip=True, clip_on=True)
        if renderer is None:
            placed.append(label)
            continue
        box = label.get_window_extent(renderer)
        for offset in ((4, -10), (-4 - box.width * 72 / ax.figure.dpi, 3)):  # below, then left, where it does not fit above
            if frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1):
                break
            label.set_position(offset)
            box = label.get_window_extent(renderer)
        inside = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
        if not inside or any(box.overlaps(other) for other in boxes):
            label.remove()
            continue
        placed.append(label)
        boxes.append(box)
    return placed


def _save(fig, path: Path, legend: dict) -> None:
    fig.savefig(path, dpi=110, metadata={"Legend": json.dumps(list(legend))})
    plt.close(fig)


def _legend_entries(fig, order: list[str]) -> dict:
    """One entry per label over all panels (a method run on one task only still gets one): the
    methods in ``order``, then the rest (unpruned, the Pareto front)."""
    entries = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    rank = {label: i for i, label in enumerate(order)}
    return dict(sorted(entries.items(), key=lambda entry: rank.get(entry[0], len(rank))))


def _score_vs_ratio(ax, frame: pd.DataFrame, styles) -> None:
    baseline = frame[frame["method"] == BASELINE]
    start = baseline["score"].iloc[0] if len(baseline) else None
    for method, rows in frame[frame["method"] != BASELINE].groupby("method"):
        rows = rows.sort_values("ratio")
        ratios, scores = list(rows["ratio"]), list(rows["score"])
        if start is not None and ratios[0] > 0:  # ratio 0 is the unpruned run
            ratios, scores = [0.0, *ratios], [start, *scores]
        _line(ax, ratios, scores, styles[method], method)
    if start is not None:
        ax.axhline(start, color="black", linestyle=":", linewidth=1, label=UNPRUNED)
    ax.set_xlabel("pruning ratio (fraction of audio tokens removed)")


def _line(ax, ratios, values, style: dict, label: str) -> None:
    """One method's line against ratio, in its style (shifted sideways by its offset)."""
    ax.plot([r + style["offset"] for r in ratios], values, color=style["color"], marker=style["marker"],
            linestyle=style["linestyle"], markersize=style["size"], linewidth=style["width"], label=label)


def _score_vs_prefill(ax, frame: pd.DataFrame, styles) -> list[tuple[float, float, str, object]]:
    """The points of every method, the unpruned one and the Pareto front; returns the ratio labels
    to place once the figure is laid out (``place_labels``)."""
    labels: list[tuple[float, float, str, object]] = []
    for method, rows in frame[frame["method"] != BASELINE].groupby("method"):
        style = styles[method]
        rows = rows.sort_values("ratio")
        x, y = rows["prefill_ms_median"], rows["score"]
        spread = _spread(rows)
        ax.errorbar(x, y, xerr=spread, fmt=style["marker"], color=style["color"], markersize=style["size"], elinewidth=0.8,
                    capsize=2, label=method)
        points = [(px, py, ratio_text(ratio), style["color"]) for px, py, ratio in zip(x, y, rows["ratio"])
                  if pd.notna(px) and pd.notna(py)]
        labels += points[-1:] + points[:1] + points[1:-1]  # each method's highest and lowest ratio first
    baseline = frame[frame["method"] == BASELINE]
    if len(baseline):
        ax.errorbar(baseline["prefill_ms_median"], baseline["score"], xerr=_spread(baseline), fmt="*", markersize=12,
                    color="black", elinewidth=0.8, capsize=2, zorder=3, label=UNPRUNED)
    front = pareto_front(frame)
    ax.step(front["prefill_ms_median"], front["score"], where="post", color="grey", linewidth=2, alpha=0.5, label="Pareto front")
    ax.set_xlabel("prefill ms (median; bars: middle half of the samples)")
    return labels


def _spread(rows: pd.DataFrame):
    """Horizontal error bars: from the first to the third quartile of the per-sample prefill times."""
    if "prefill_ms_q25" not in rows or rows["prefill_ms_q25"].isna().all():
        return None
    low = (rows["prefill_ms_median"] - rows["prefill_ms_q25"]).clip(lower=0).fillna(0)
    high = (rows["prefill_ms_q75"] - rows["prefill_ms_median"]).clip(lower=0).fillna(0)
    return [list(low), list(high)]


def pareto_front(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs no other run beats on both latency (lower) and score (higher, or lower where the rows'
    ``higher_is_better`` says so), by increasing latency."""
    directions = set(frame["higher_is_better"].dropna().astype(bool)) if "higher_is_better" in frame else set()
    if len(directions) > 1:
        raise ValueError("a Pareto front needs scores of one direction: these rows mix higher- and lower-is-better metrics")
    sign = -1.0 if directions == {False} else 1.0  # compare sign * score, so that larger is always better
    points = frame.dropna(subset=["prefill_ms_median", "score"])
    points = points.assign(_better=sign * points["score"]).sort_values(["prefill_ms_median", "_better"], ascending=[True, False])
    best, keep = -math.inf, []
    for index, better in points["_better"].items():
        if better > best:
            keep.append(index)
            best = better
    return points.loc[keep].drop(columns="_better")


def plot_kv_saved(frame: pd.DataFrame, model, path: Path, styles: dict) -> Path:
    """KV cache saved after the prefill (percent of the unpruned baseline's) against ratio, one line
    per method, averaged over the tasks: where token dropping and cache presses pay in memory."""
    fig, ax = plt.subplots(figsize=(6, 4))
    pressed = frame[frame["method"] != BASELINE].dropna(subset=["kv_saved"])
    for method, rows in pressed.groupby("method"):
        saved = rows.groupby("ratio")["kv_saved"].mean() * 100
        _line(ax, list(saved.index), list(saved.values), styles[method], method)
    ax.set_xlabel("pruning ratio (fraction of audio tokens removed)")
    ax.set_ylabel("KV cache saved after prefill (%)")
    ax.set_title(f"{Path(str(model)).name}: KV cache saved (mean over tasks)")
    ax.grid(alpha=0.3)
    legend = _legend_entries(fig, order=list(styles))
    if legend:
        ax.legend(list(legend.values()), list(legend), fontsize=8)
    fig.tight_layout()
    _save(fig, path, legend)
    return path
