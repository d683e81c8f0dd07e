"""The report's section on how the samples ran: batches, what was shared between runs, where the
per-sample timings come from, the throughput of the batched calls, whether batching changed answers,
and what decoding compiled (from ``runs.jsonl``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..markdown import markdown_table
from .headline import ratio_text
from .store import ENGINE_RECORD, TIMING_PASS, read_log
from .summary import MIB, NOT_TIMED, TIMING_SUBSET


def batching_section(summary: pd.DataFrame, results: pd.DataFrame | None, out_dir: Path) -> str:
    """Markdown for ``report.md`` (empty for a folder of results written before batching existed)."""
    if "timing_source" not in summary:
        return ""
    parts = ["## How the samples ran\n", _how(summary, results) + _batch_choice(out_dir)]
    throughput = summary.dropna(subset=["samples_per_s"])
    if not throughput.empty:
        table = throughput.groupby(["model", "method", "ratio"], sort=True).agg(
            batch=("batch_size_mean", "mean"), samples=("samples_per_s", "mean"), tokens=("tokens_per_s", "mean"),
            identical=("batch_identical", "mean"), change=("batch_score_change", "mean")).reset_index()
        rows = ([r.model, r.method, ratio_text(r.ratio), f"{r.batch:.1f}", f"{r.samples:.2f}", f"{r.tokens:.1f}",
                 "—" if pd.isna(r.identical) else f"{100 * r.identical:.0f}%",
                 "—" if pd.isna(r.change) else f"{r.change:+.1f}"] for r in table.itertuples())
        parts.append("Throughput of the scoring pass (mean over tasks; each batch's prefill and decoding time counted "
                     "once), and, on the timing subset, answers identical to the sample run alone and the score "
                     "difference (batched minus alone):\n\n" + markdown_table(
                         ["model", "method", "ratio", "rows per call", "samples/s", "tokens/s", "identical answers",
                          "score change"], rows) + "\n")
    engine = _engine(out_dir)
    if engine:
        parts.append(engine)
    return "\n".join(parts)


def _how(summary: pd.DataFrame, results: pd.DataFrame | None) -> str:
    lines = []
    decoded = sorted(summary["cache"].dropna().unique())
    lines.append(f"- Decoding: {', '.join(decoded) or 'unknown'} (engine: kvprune's generation engine; static or "
                 "dynamic: stock `generate`).")
    batch = summary["batch_size_mean"].max() if "batch_size_mean" in summary else float("nan")
    if not pd.isna(batch) and round(batch) <= 1:
        lines.append("- Batches: one sample per call (`--batch-size` decodes several together).")
    elif not pd.isna(batch):
        lines.append(f"- Batches: up to {batch:.0f} samples per call on average (each prefilled on its own, decoded "
                     "together).")
    if results is not None and "encoder_reused" in results:
        scoring = results[results.get("pass", pd.Series(index=results.index, dtype=object)) != TIMING_PASS]
        reused = scoring["encoder_reused"].eq(True).sum()
        layers = scoring["layers_reused"].eq(True).sum() if "layers_reused" in scoring else 0
        shared = (f"and its embedding and decoder layers before K ({layers} of {len(scoring)} scoring runs replayed them "
                  "from an earlier run of the same sample under a token press at the same K)" if layers else
                  "but not its decoder layers before K, which every run computed again (`--no-share-layers`, or no two "
                  "token presses at one K)")
        lines.append(f"- Shared between the runs of a sample: its audio encoder output ({reused} of {len(scoring)} "
                     f"scoring runs reused one computed by an earlier run of the same sample), {shared}: the same "
                     "tensors, so answers are unchanged.")
    lines.append(_timings(summary))
    return "\n".join(lines) + "\n"


def _batch_choice(out_dir: Path) -> str:
    """Why ``--batch-size auto`` chose its size, as the sweep recorded it."""
    choices = list(dict.fromkeys(run["config"]["batch_choice"] for run in read_log(out_dir)
                                 if (run.get("config") or {}).get("batch_choice")))
    return "".join(f"- Batch size: {choice}.\n" for choice in choices)


def _timings(summary: pd.DataFrame) -> str:
    """Where the timings come from, as the summary's rows say: the timing subset, every sample, or
    nowhere (``--timing-samples 0`` beside a batched or sharing scoring pass); runs that failed or
    compiled, and the warm-up, are never timed."""
    sources, timed = set(summary["timing_source"]), summary["timed_samples"].max()
    if timed == 0:
        empty = "the prefill, decoding and KV cache columns, the speedups and the score-vs-prefill figure are empty"
        if sources == {NOT_TIMED}:
            return ("- Timings: none. `--timing-samples 0` asked for no timing subset while the scoring pass batched "
                    f"samples or shared their audio encoder's output or first layers, so no run was timed alone: {empty}. "
                    "`--timing-samples N` runs the first N samples of each task alone, for their timings.")
        return f"- Timings: none. Every run that could have been timed failed, was the warm-up or compiled: {empty}."
    if TIMING_SUBSET in sources:
        return (f"- Timings (prefill, decoding, KV cache, speedups and the score-vs-prefill figure) come from the timing "
                f"subset: up to {timed:.0f} samples per task and run, each run alone with nothing shared (a call that "
                "compiled or captured a graph is run again, warm). Scores use every sample once, from the scoring pass.")
    return "- Timings come from every sample: each ran alone, with nothing shared."


def _engine(out_dir: Path) -> str:
    records = read_log(out_dir, kind=ENGINE_RECORD)
    if not records:
        return ""
    rows = []
    for r in records:
        fallbacks = "; ".join(f"{n} × {why}" for why, n in (r.get("fallbacks") or {}).items()) or "none"
        rows.append([r.get("time", ""), r.get("model", ""), str(r.get("compile_graphs", "")), str(r.get("recompiles", "")),
                     str(r.get("cuda_graphs", "")), str(r.get("decode_states", "")),
                     f"{(r.get('decode_state_bytes') or 0) / MIB:.0f}", r.get("unsupported") or fallbacks,
                     r.get("prefill_layers", "")])
    return ("What decoding compiled, per model run (`runs.jsonl`): compiled graphs and recompilations in the process "
            "so far, CUDA graphs captured, decode states kept and their memory, what could not use the engine or a "
            "graph, and how the prefills ran their decoder layers >= K (`--compile-prefill`):\n\n"
            + markdown_table(["time", "model", "compiled graphs", "recompilations", "CUDA graphs", "decode states",
                              "state MiB", "fallbacks", "prefill layers >= K"], rows) + "\n")
