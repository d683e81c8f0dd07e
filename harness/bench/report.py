"""Write a bench run: ``bench.csv`` (every number), ``bench.md`` (one table per model and audio
length) and ``prefill_vs_ratio.png`` (prefill time against ratio, one panel per model and length)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import pandas as pd  # noqa: E402

from .presets import PRESETS  # noqa: E402

UNPRUNED, IDEAL = "none", "ideal"
GROUP = ["preset", "audio_seconds"]
GIB, MIB = 2.0**30, 2.0**20

#: measured per row, in this order (``encoder``: "fast" where ``kvprune.fast_audio_encoder`` replaced
#: something in the preset's encoder, else "stock"; ``error`` says what failed, if anything)
MEASURED = (
    "preset family encoder llm_layers layer audio_seconds audio_tokens seq_len method ratio kept_tokens prefill_ms "
    "encoder_ms decode_ms_per_token peak_gib kv_bytes score_ms head_layers_ms tail_layers_ms eager_score_ms "
    "eager_score_extra_gib last_row_score_ms error"
).split()
#: computed from the measured rows of the same model and audio length
DERIVED = "prefill_vs_unpruned ideal_ms prefill_vs_ideal vs_frame_ms kv_mib kv_vs_unpruned decode_vs_unpruned".split()
#: the same for every row of a run
META = "card device dtype attn repeats warmup decode_tokens torch transformers kvprune date command".split()
COLUMNS = MEASURED + DERIVED + META


def bench_frame(rows: list[dict], meta: dict) -> pd.DataFrame:
    """All rows of a run with derived and run-wide columns, in ``COLUMNS`` order."""
    frame = pd.DataFrame(rows, columns=MEASURED)
    frame = _with_derived(frame)
    for name in META:
        frame[name] = meta[name]
    return frame[COLUMNS]


def _with_derived(frame: pd.DataFrame) -> pd.DataFrame:
    def reference(method: str, columns: dict[str, str], by: list[str]) -> pd.DataFrame:
        picked = frame[frame["method"] == method]
        return picked[by + list(columns)].rename(columns=columns)

    unpruned = reference(
        UNPRUNED, {"prefill_ms": "_prefill", "decode_ms_per_token": "_decode", "kv_bytes": "_kv"}, GROUP
    )
    ideal = reference(IDEAL, {"prefill_ms": "ideal_ms"}, GROUP + ["ratio"])
    frame_press = reference("frame", {"prefill_ms": "_frame"}, GROUP + ["ratio"])
    merged = frame.merge(unpruned, on=GROUP, how="left")
    merged = merged.merge(ideal, on=GROUP + ["ratio"], how="left").merge(frame_press, on=GROUP + ["ratio"], how="left")
    press = ~merged["method"].isin([UNPRUNED, IDEAL])
    merged["prefill_vs_unpruned"] = merged["prefill_ms"] / merged["_prefill"]
    merged["ideal_ms"] = merged["ideal_ms"].where(press)
    merged["prefill_vs_ideal"] = merged["prefill_ms"] / merged["ideal_ms"]
    merged["vs_frame_ms"] = (merged["prefill_ms"] - merged["_frame"]).where(press)
    merged["kv_mib"] = merged["kv_bytes"] / MIB
    merged["kv_vs_unpruned"] = merged["kv_bytes"] / merged["_kv"]
    merged["decode_vs_unpruned"] = merged["decode_ms_per_token"] / merged["_decode"]
    return merged.drop(columns=["_prefill", "_decode", "_kv", "_frame"])


def write_report(frame: pd.DataFrame, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.csv", out / "bench.md", out / "prefill_vs_ratio.png"]
    frame.to_csv(paths[0], index=False)
    paths[1].write_text(markdown(frame))
    plot_prefill(frame, paths[2])
    return paths


# -- markdown ----------------------------------------------------------------------------------------
TABLE = {
    "method": ("method", str),
    "ratio": ("ratio", "{:g}"),
    "audio_tokens": ("audio tokens", "{:.0f}"),
    "kept_tokens": ("kept tokens", "{:.0f}"),
    "prefill_ms": ("prefill ms", "{:.1f}"),
    "prefill_vs_unpruned": ("vs unpruned", "{:.3f}×"),
    "prefill_vs_ideal": ("vs ideal", "{:.3f}×"),
    "score_ms": ("score ms", "{:.2f}"),
    "encoder_ms": ("encoder ms", "{:.1f}"),
    "decode_ms_per_token": ("decode ms/token", "{:.2f}"),
    "peak_gib": ("peak GiB", "{:.2f}"),
    "kv_mib": ("KV MiB", "{:.1f}"),
}


def _cell(value, form) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return form(value) if callable(form) else form.format(value)


def _table(rows: pd.DataFrame) -> str:
    header = "| " + " | ".join(name for name, _ in TABLE.values()) + " |"
    rule = "|" + "---|" * len(TABLE)
    body = [
        "| " + " | ".join(_cell(row[col], form) for col, (_, form) in TABLE.items()) + " |"
        for _, row in rows.iterrows()
    ]
    return "\n".join([header, rule, *body])


def _scoring_line(rows: pd.DataFrame) -> str:
    unpruned = rows[rows["method"] == UNPRUNED]
    if unpruned.empty or pd.isna(unpruned["prefill_ms"].iloc[0]):
        return ""
    u = unpruned.iloc[0]
    share = 100 * u["last_row_score_ms"] / u["prefill_ms"]
    return (
        f"Scoring at layer K-1 = {int(u['layer']) - 1}: AudioMarathon's eager attention matrix costs "
        f"{_cell(u['eager_score_ms'], '{:+.2f}')} ms and {_cell(u['eager_score_extra_gib'], '{:+.2f}')} GiB over sdpa; "
        f"kvprune's last-row scores take {_cell(u['last_row_score_ms'], '{:.2f}')} ms ({_cell(share, '{:.2f}')}% of "
        "the unpruned prefill). `score ms` = a press's whole selection (scores, select, slot layout)."
    )


def markdown(frame: pd.DataFrame) -> str:
    first = frame.iloc[0]
    lines = [
        "# kvprune bench",
        "",
        f"- card: {first['card']} ({first['device']}, {first['dtype']}, attention {first['attn']})",
        f"- torch {first['torch']}, transformers {first['transformers']}, kvprune {first['kvprune']}; {first['date']}",
        f"- command: `{first['command']}`",
        f"- medians of {first['repeats']} rounds after {first['warmup']} warm-up rounds; each round runs every "
        "request (unpruned and each press x ratio) once, starting one place later each round, so drift "
        f"spreads over all of them; decode = {first['decode_tokens']} forced tokens",
        "- random weights built from each architecture's config (timing depends on shapes, not values); batch 1",
        "- ideal = unpruned prefill − layers ≥ K on the full prompt + layers ≥ K on the kept prompt (those layers "
        "timed alone, in the same interleaved rounds as the requests)",
    ]
    for (preset, seconds), rows in frame.groupby(GROUP, sort=False):
        head = rows.iloc[0]
        note = PRESETS.get(preset).note if preset in PRESETS else ""
        lines += [
            "",
            f"## {preset}: {seconds:g} s of audio ({_cell(head['audio_tokens'], '{:.0f}')} audio tokens, "
            f"{_cell(head['seq_len'], '{:.0f}')} prompt tokens, K = {_cell(head['layer'], '{:.0f}')}, "
            f"{_cell(head['encoder'], str)} audio encoder)",
        ]
        if note:
            lines += ["", f"*{preset}: {note}.*"]
        lines += ["", _table(rows)]
        scoring = _scoring_line(rows)
        if scoring:
            lines += ["", scoring]
    errors = frame[frame["error"].notna()]
    if not errors.empty:
        lines += ["", "## Errors", ""]
        lines += [f"- {r.preset} {r.audio_seconds:g} s {r.method} {r.ratio:g}: {r.error}" for r in errors.itertuples()]
    return "\n".join(lines) + "\n"


# -- figure ------------------------------------------------------------------------------------------
def plot_prefill(frame: pd.DataFrame, path: Path) -> None:
    """Prefill ms against ratio: each press, the unpruned prefill and the ideal; a panel per model
    (row) and audio length (column)."""
    presets = list(dict.fromkeys(frame["preset"]))
    lengths = list(dict.fromkeys(frame["audio_seconds"]))
    fig, axes = plt.subplots(
        len(presets), len(lengths), figsize=(max(4.5 * len(lengths), 7.0), 3.6 * len(presets)), squeeze=False
    )
    for i, preset in enumerate(presets):
        for j, seconds in enumerate(lengths):
            rows = frame[(frame["preset"] == preset) & (frame["audio_seconds"] == seconds)]
            _panel(axes[i][j], rows, f"{preset}, {seconds:g} s")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        columns = min(len(labels), 3 if len(lengths) == 1 else 6)  # a lone panel is narrow: wrap the legend
        fig.legend(handles, labels, loc="lower center", ncol=columns, frameon=False)
    fig.tight_layout(rect=(0, 0.16 if len(lengths) == 1 else 0.08, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _panel(ax, rows: pd.DataFrame, title: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("ratio (fraction of audio tokens removed)")
    ax.set_ylabel("prefill ms")
    rows = rows.dropna(subset=["prefill_ms"])
    unpruned = rows[rows["method"] == UNPRUNED]["prefill_ms"]
    if not unpruned.empty:
        ax.axhline(unpruned.iloc[0], color="black", linestyle="--", label="unpruned")
    for method, group in rows[rows["method"] != UNPRUNED].groupby("method", sort=False):
        group = group.sort_values("ratio")
        style = dict(color="gray", linestyle=":", marker="s") if method == IDEAL else dict(marker="o")
        ax.plot(group["ratio"], group["prefill_ms"], label=method, **style)
    if rows.empty:
        ax.text(0.5, 0.5, "no measurement", ha="center", va="center", transform=ax.transAxes)
