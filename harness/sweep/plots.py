"""Accuracy against pruning ratio and against prefill latency, per task and averaged over tasks; KV
cache saved against pruning ratio, per method."""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import pandas as pd  # noqa: E402

from .summary import direction, task_averages  # noqa: E402
from .config import BASELINE  # noqa: E402

def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(text)).name or str(text)).strip("_")


def plot_summary(summary: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Write the two figures per model; returns the PNG paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for model, frame in summary.groupby("model"):
        panels = _panels(frame)
        paths.append(_figure(panels, model, out_dir / f"{slug(model)}_score_vs_ratio.png", _score_vs_ratio))
        paths.append(_figure(panels, model, out_dir / f"{slug(model)}_score_vs_prefill.png", _score_vs_prefill))
        paths.append(plot_kv_saved(frame, model, out_dir / f"{slug(model)}_kv_saved.png"))
    return paths


def _panels(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, y label, rows) per task, then the average over tasks (one per metric direction)."""
    panels = [
        (task, f"{rows['metric'].iloc[0]} ({direction(rows['higher_is_better'].iloc[0])})", rows)
        for task, rows in frame.groupby("task")
    ]
    if len(panels) > 1:
        panels += [(title, "mean primary score", rows) for title, rows in task_averages(frame)]
    return panels


def _figure(panels, model, path: Path, draw) -> Path:
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.8 * rows), squeeze=False)
    methods = sorted({m for _, _, f in panels for m in f["method"] if m != BASELINE})
    colors = {m: plt.get_cmap("tab10")(i) for i, m in enumerate(methods)}
    for ax, (title, ylabel, frame) in zip(axes.flat, panels):
        draw(ax, frame, colors)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.set_ylim(min(0.0, frame["score"].min() - 2), max(102.0, frame["score"].max() + 2))  # the whole 0-100 scale
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.remove()
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle(Path(str(model)).name)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _score_vs_ratio(ax, frame: pd.DataFrame, colors) -> None:
    for method, rows in frame[frame["method"] != BASELINE].groupby("method"):
        rows = rows.sort_values("ratio")
        ax.plot(rows["ratio"], rows["score"], marker="o", color=colors[method], label=method)
    baseline = frame[frame["method"] == BASELINE]
    if len(baseline):
        ax.axhline(baseline["score"].iloc[0], color="black", linestyle="--", label="unpruned")
    ax.set_xlabel("pruning ratio (fraction of audio tokens removed)")


def _score_vs_prefill(ax, frame: pd.DataFrame, colors) -> None:
    for method, rows in frame[frame["method"] != BASELINE].groupby("method"):
        rows = rows.sort_values("ratio")
        ax.plot(rows["prefill_ms_median"], rows["score"], marker="o", linewidth=0.8, color=colors[method], label=method)
    baseline = frame[frame["method"] == BASELINE]
    if len(baseline):
        ax.scatter(baseline["prefill_ms_median"], baseline["score"], marker="*", s=160, color="black", zorder=3, label="unpruned")
    front = pareto_front(frame)
    ax.step(front["prefill_ms_median"], front["score"], where="post", color="grey", linewidth=2, alpha=0.6, label="Pareto front")
    ax.set_xlabel("prefill (ms, median)")


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


def plot_kv_saved(frame: pd.DataFrame, model, path: Path) -> Path:
    """KV cache saved after the prefill (percent of the unpruned baseline's) against ratio, one line
    per method, averaged over the tasks: where token dropping and cache presses pay in memory."""
    fig, ax = plt.subplots(figsize=(6, 4))
    pressed = frame[frame["method"] != BASELINE].dropna(subset=["kv_saved"])
    for method, rows in pressed.groupby("method"):
        saved = rows.groupby("ratio")["kv_saved"].mean() * 100
        ax.plot(saved.index, saved.values, marker="o", label=method)
    ax.set_xlabel("pruning ratio (fraction of audio tokens removed)")
    ax.set_ylabel("KV cache saved after prefill (%)")
    ax.set_title(f"{Path(str(model)).name}: KV cache saved (mean over tasks)")
    ax.grid(alpha=0.3)
    if len(pressed):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
