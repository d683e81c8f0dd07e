"""The bench's figures: prefill against ratio (each press, the unpruned prefill, stock Hugging Face's and
the ideal), and requests per second against batch size; one panel per model and audio length."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

UNPRUNED, IDEAL, STOCK = "none", "ideal", "stock"  # the method of the unpruned, ideal and stock rows


def _panels(frame: pd.DataFrame, draw, path: Path) -> None:
    """One panel per model (row) and audio length (column), drawn by ``draw(ax, rows, title)``."""
    presets = list(dict.fromkeys(frame["preset"]))
    lengths = list(dict.fromkeys(frame["audio_seconds"]))
    fig, axes = plt.subplots(
        len(presets), len(lengths), figsize=(max(4.5 * len(lengths), 7.0), 3.6 * len(presets)), squeeze=False
    )
    for i, preset in enumerate(presets):
        for j, seconds in enumerate(lengths):
            rows = frame[(frame["preset"] == preset) & (frame["audio_seconds"] == seconds)]
            draw(axes[i][j], rows, f"{preset}, {seconds:g} s")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        columns = min(len(labels), 3 if len(lengths) == 1 else 6)  # a lone panel is narrow: wrap the legend
        fig.legend(handles, labels, loc="lower center", ncol=columns, frameon=False)
    fig.tight_layout(rect=(0, 0.16 if len(lengths) == 1 else 0.08, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_prefill(frame: pd.DataFrame, path: Path) -> None:
    """Prefill ms against ratio: each press, the unpruned prefill (and stock HF's) and the ideal."""
    _panels(frame[frame["batch"] == 1], _prefill_panel, path)


def _prefill_panel(ax, rows: pd.DataFrame, title: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("ratio (fraction of audio tokens removed)")
    ax.set_ylabel("prefill ms")
    rows = rows.dropna(subset=["prefill_ms"])
    for (method, cache), style in {(UNPRUNED, None): dict(color="black", linestyle="--"),
                                   (STOCK, "dynamic"): dict(color="tab:red", linestyle="-."),
                                   (STOCK, "static"): dict(color="tab:red", linestyle=":")}.items():
        line = rows[(rows["method"] == method) & ((rows["cache"] == cache) if cache else True)]["prefill_ms"]
        if not line.empty:
            ax.axhline(line.iloc[0], label="unpruned" if method == UNPRUNED else f"stock HF ({cache})", **style)
    for method, group in rows[~rows["method"].isin([UNPRUNED, STOCK])].groupby("method", sort=False):
        group = group.sort_values("ratio")
        style = dict(color="gray", linestyle=":", marker="s") if method == IDEAL else dict(marker="o")
        ax.plot(group["ratio"], group["prefill_ms"], label=method, **style)
    if rows.empty:
        ax.text(0.5, 0.5, "no measurement", ha="center", va="center", transform=ax.transAxes)


def plot_throughput(frame: pd.DataFrame, path: Path) -> None:
    """Requests per second against batch size, one line per method and ratio."""
    _panels(frame, _throughput_panel, path)


def _throughput_panel(ax, rows: pd.DataFrame, title: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("batch size")
    ax.set_ylabel("requests/s")
    rows = rows.dropna(subset=["requests_per_s"])
    for (method, ratio), group in rows.groupby(["method", "ratio"], sort=False):
        group = group.sort_values("batch")
        label = "unpruned" if method == UNPRUNED else f"{method} {ratio:g}"
        ax.plot(group["batch"], group["requests_per_s"], marker="o", label=label)
    if rows.empty:
        ax.text(0.5, 0.5, "no measurement", ha="center", va="center", transform=ax.transAxes)
