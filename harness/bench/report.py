"""Write a bench run: ``bench.csv`` (every number), ``bench.md`` (one table per model and audio length,
in the shape of the run's mode) and a figure (``figures.py``: prefill against ratio; throughput against
batch size)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..markdown import markdown_table
from .compare import BELOW_IDEAL_FLOOR, below_by_rounds, compiled_words, ideal_span, over_ideal_by_rounds, targets, variant
from .figures import IDEAL, STOCK, UNPRUNED, plot_prefill, plot_throughput
from .presets import PRESETS
from .roofline import below_floor_lines, bound_line, with_decode_bound, with_encoder_bound
from .rounds import STALL_FACTOR

GROUP = ["preset", "audio_seconds"]
MIB = 2.0**20
CACHE_PRESS_IDEAL = "n/a: a cache press leaves the prefill's work as it is (it evicts after each layer)"

#: measured per row (``encoder``: the audio encoder path that ran, "fast" where kvprune.fast_audio_encoder
#: changed something; ``path``: forward (prefill + forced steps) or generate; ``error``: what failed)
MEASURED = (
    "preset family encoder llm_layers layer kind method ratio drop_ratio batch cache decode_compiled decode_fell_back prefill_compiled prefill_fell_back path "
    "compiled_in_timing "
    "audio_seconds audio_tokens seq_len kept_tokens prefill_ms layers_ms encoder_ms llm_ms llm_noise_ms head_ms score_ms "
    "host_lead_encoder_ms host_lead_k_ms host_lead_end_ms host_loop_ns "
    "decode_ms_per_token request_ms peak_gib kv_bytes kv_alloc_bytes rounds dropped_rounds prefill_vs_ideal_paired "
    "prefill_vs_ideal_paired_noise layers_vs_ideal_paired layers_vs_ideal_paired_noise paired_rounds eager_score_ms "
    "eager_score_extra_gib last_row_score_ms encoder_identical encoder_max_rel_diff encoder_flops max_batch_predicted max_batch max_batch_tries "
    "step_flops step_bytes max_batch_decode_tokens_per_s max_batch_requests_per_s max_batch_step_ms max_batch_step_flops "
    "max_batch_step_bytes max_batch_kv_bytes error"
).split()
#: computed from the measured rows of the same model, audio length and batch size
DERIVED = (
    "prefill_vs_unpruned ideal_ms ideal_llm_ms prefill_vs_ideal llm_vs_ideal below_ideal ideal_note vs_frame_ms "
    "score_share kv_mib kv_vs_unpruned decode_vs_unpruned requests_per_s prefill_tokens_per_s decode_tokens_per_s "
    "encoder_speedup_vs_stock prefill_speedup_vs_stock request_speedup_vs_stock_dynamic request_speedup_vs_stock_static "
    "encoder_tflops_s encoder_floor_ms encoder_vs_floor encoder_below_floor step_matmul_bound_ms step_bytes_bound_ms "
    "step_vs_bound step_sequential_bound_ms step_vs_sequential max_batch_matmul_bound_ms max_batch_bytes_bound_ms "
    "max_batch_vs_bound max_batch_sequential_bound_ms max_batch_vs_sequential"
).split()
#: the same for every row of a run
META = "mode card device dtype attn repeats warmup decode_tokens gemm_tflops copy_tb_s torch transformers kvprune date command".split()
COLUMNS = MEASURED + DERIVED + META


def bench_frame(rows: list[dict], meta: dict) -> pd.DataFrame:
    """All rows of a run with derived and run-wide columns, in ``COLUMNS`` order."""
    frame = pd.DataFrame(rows, columns=MEASURED)
    frame["batch"] = frame["batch"].fillna(1).astype(int)
    frame = _with_derived(frame)
    for name in META:
        frame[name] = meta.get(name)  # gemm_tflops: None where the run did not measure it
    return with_decode_bound(with_encoder_bound(frame))[COLUMNS]


def _below_by_rounds(row, by_medians: bool) -> bool:
    """Below its ideal by the compare target's rule: round by round where its rounds pair up with the ideal's (as
    ``compare._within_ideal`` judges), else by the medians of the LLM part (``by_medians``)."""
    by_rounds = over_ideal_by_rounds(row, ideal_span(row.get("layers_ms"), row.get("_ideal_layers")))
    return bool(by_medians) if by_rounds is None or pd.isna(row.get("ideal_llm_ms")) else below_by_rounds(*by_rounds)


def _pick(frame: pd.DataFrame, mask, columns: dict[str, str], by: list[str]) -> pd.DataFrame:
    return frame.loc[mask, by + list(columns)].rename(columns=columns).drop_duplicates(by)


def _with_derived(frame: pd.DataFrame) -> pd.DataFrame:
    by = GROUP + ["batch"]
    method = frame["method"]
    merged = frame.merge(
        _pick(frame, method == UNPRUNED, {"prefill_ms": "_prefill", "decode_ms_per_token": "_decode", "kv_bytes": "_kv"}, by),
        on=by, how="left",
    )
    merged = merged.merge(
        _pick(frame, method == IDEAL, {"prefill_ms": "ideal_ms", "llm_ms": "ideal_llm_ms", "llm_noise_ms": "_ideal_noise",
                                       "layers_ms": "_ideal_layers"}, by + ["drop_ratio"]),
        on=by + ["drop_ratio"], how="left",
    )
    merged = merged.merge(_pick(frame, method == "frame", {"prefill_ms": "_frame"}, by + ["ratio"]), on=by + ["ratio"], how="left")
    stock = method == STOCK
    merged = merged.merge(
        _pick(frame, stock & (frame["cache"] == "dynamic"),
              {"prefill_ms": "_stock_prefill", "request_ms": "_stock_request", "encoder_ms": "_stock_encoder"}, by),
        on=by, how="left",
    )
    merged = merged.merge(_pick(frame, stock & (frame["cache"] == "static"), {"request_ms": "_static_request"}, by),
                          on=by, how="left")

    press = ~merged["method"].isin([UNPRUNED, IDEAL, STOCK])
    drops = press & merged["kind"].isin(["token", "composed"]) & merged["drop_ratio"].notna()
    for column in ("ideal_ms", "ideal_llm_ms", "_ideal_noise"):
        merged[column] = merged[column].where(drops)
    merged["prefill_vs_unpruned"] = merged["prefill_ms"] / merged["_prefill"]
    merged["prefill_vs_ideal"] = merged["prefill_ms"] / merged["ideal_ms"]
    merged["llm_vs_ideal"] = merged["llm_ms"] / merged["ideal_llm_ms"]
    margin = (2 * (merged["llm_noise_ms"] ** 2 + merged["_ideal_noise"] ** 2) ** 0.5).clip(
        lower=BELOW_IDEAL_FLOOR * merged["ideal_llm_ms"]
    )
    by_medians = (merged["llm_ms"] < merged["ideal_llm_ms"] - margin).fillna(False).astype(bool)
    merged["below_ideal"] = [_below_by_rounds(row, medians) for (_, row), medians in zip(merged.iterrows(), by_medians)]
    merged["ideal_note"] = pd.Series(None, index=merged.index, dtype=object).mask(press & (merged["kind"] == "cache"), CACHE_PRESS_IDEAL)
    merged["vs_frame_ms"] = (merged["prefill_ms"] - merged["_frame"]).where(press)
    merged["score_share"] = merged["score_ms"] / merged["prefill_ms"]
    merged["kv_mib"] = merged["kv_bytes"] / MIB
    merged["kv_vs_unpruned"] = merged["kv_bytes"] / merged["_kv"]
    merged["decode_vs_unpruned"] = merged["decode_ms_per_token"] / merged["_decode"]
    merged["requests_per_s"] = 1000.0 * merged["batch"] / merged["request_ms"]
    merged.loc[merged["method"] == IDEAL, "requests_per_s"] = math.nan  # a prefill alone is no request
    merged["prefill_tokens_per_s"] = 1000.0 * merged["batch"] * merged["seq_len"] / merged["prefill_ms"]
    merged["decode_tokens_per_s"] = 1000.0 * merged["batch"] / merged["decode_ms_per_token"]
    merged["encoder_speedup_vs_stock"] = merged["_stock_encoder"] / merged["encoder_ms"]
    merged["prefill_speedup_vs_stock"] = merged["_stock_prefill"] / merged["prefill_ms"]
    merged["request_speedup_vs_stock_dynamic"] = merged["_stock_request"] / merged["request_ms"]
    merged["request_speedup_vs_stock_static"] = merged["_static_request"] / merged["request_ms"]
    return merged.drop(columns=[c for c in merged.columns if c.startswith("_")])


def write_report(frame: pd.DataFrame, out: Path, rounds: pd.DataFrame | None = None) -> list[Path]:
    """bench.csv, bench.md and the mode's figure; with ``rounds`` (``rounds.round_rows``), rounds.csv: every timed
    round behind the medians."""
    out.mkdir(parents=True, exist_ok=True)
    figure = "throughput_vs_batch.png" if frame["mode"].iloc[0] == "batch" else "prefill_vs_ratio.png"
    paths = [out / "bench.csv", out / "bench.md", out / figure]
    frame.to_csv(paths[0], index=False)
    paths[1].write_text(markdown(frame))
    (plot_throughput if figure.startswith("throughput") else plot_prefill)(frame, paths[2])
    if rounds is not None and not rounds.empty:
        paths.append(out / "rounds.csv")
        rounds.to_csv(paths[-1], index=False)
    return paths


# -- markdown ----------------------------------------------------------------------------------------
def _cell(value, form) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return form(value) if callable(form) else form.format(value)


def _column(name: str, form) -> Callable:
    return lambda row: _cell(row[name], form)


def _step_bounds(row) -> str:
    return f"{_cell(row['step_matmul_bound_ms'], '{:.2f}')} / {_cell(row['step_bytes_bound_ms'], '{:.2f}')}"


def _vs_ideal(row) -> str:
    if isinstance(row["ideal_note"], str):
        return "n/a (cache press)"
    text = _cell(row["llm_vs_ideal"], "{:.3f}×")
    return f"**{text} below ideal**" if row["below_ideal"] else text


def _host_leads(row) -> str:
    return " / ".join(_cell(row[name], "{:.1f}") for name in ("host_lead_encoder_ms", "host_lead_k_ms", "host_lead_end_ms"))


def _score(row) -> str:
    if pd.isna(row["score_ms"]):
        return "—"
    return f"{row['score_ms']:.2f} ({100 * row['score_share']:.1f}%)"


TABLES: dict[str, dict[str, Callable]] = {
    "ratios": {
        "method": _column("method", str),
        "kind": _column("kind", str),
        "ratio": _column("ratio", "{:g}"),
        "kept tokens": _column("kept_tokens", "{:.0f}"),
        "prefill ms": _column("prefill_ms", "{:.1f}"),
        "vs unpruned": _column("prefill_vs_unpruned", "{:.3f}×"),
        "LLM ms": _column("llm_ms", "{:.1f}"),
        "LLM vs ideal": _vs_ideal,
        "score ms (% prefill)": _score,
        "encoder ms": _column("encoder_ms", "{:.1f}"),
        "encoder TFLOP/s": _column("encoder_tflops_s", "{:.0f}"),
        "decode ms/token": _column("decode_ms_per_token", "{:.2f}"),
        "peak GiB": _column("peak_gib", "{:.2f}"),
        "KV MiB": _column("kv_mib", "{:.1f}"),
        "KV vs unpruned": _column("kv_vs_unpruned", "{:.3f}×"),
    },
    "batch": {
        "method": _column("method", str),
        "ratio": _column("ratio", "{:g}"),
        "batch": _column("batch", "{:.0f}"),
        "prefill ms": _column("prefill_ms", "{:.1f}"),
        "decode ms/token": _column("decode_ms_per_token", "{:.2f}"),
        "matmul / bytes bound ms": _step_bounds,
        "step / larger bound": _column("step_vs_bound", "{:.2f}x"),
        "step / sequential": _column("step_vs_sequential", "{:.2f}x"),
        "requests/s": _column("requests_per_s", "{:.2f}"),
        "prefill tokens/s": _column("prefill_tokens_per_s", "{:,.0f}"),
        "decoded tokens/s": _column("decode_tokens_per_s", "{:,.0f}"),
        "peak GiB": _column("peak_gib", "{:.2f}"),
        "KV MiB": _column("kv_mib", "{:.1f}"),
    },
    "compare": {
        "run": lambda row: variant(row),
        "encoder ms": _column("encoder_ms", "{:.1f}"),
        "encoder TFLOP/s": _column("encoder_tflops_s", "{:.0f}"),
        "encoder × floor": _column("encoder_vs_floor", "{:.2f}×"),
        "prefill ms": _column("prefill_ms", "{:.1f}"),
        "LLM ms": _column("llm_ms", "{:.1f}"),
        "host lead ms (encoder end / layer K / last layer)": _host_leads,
        "decode ms/token": _column("decode_ms_per_token", "{:.2f}"),
        "request ms": _column("request_ms", "{:.1f}"),
        "peak GiB": _column("peak_gib", "{:.2f}"),
        "KV MiB": _column("kv_mib", "{:.1f}"),
        "prefill × stock": _column("prefill_speedup_vs_stock", "{:.2f}×"),
        "request × stock dynamic": _column("request_speedup_vs_stock_dynamic", "{:.2f}×"),
        "request × stock static": _column("request_speedup_vs_stock_static", "{:.2f}×"),
    },
}


def _table(rows: pd.DataFrame, columns: dict[str, Callable]) -> str:
    return markdown_table(list(columns), ([cell(row) for cell in columns.values()] for _, row in rows.iterrows()))


def _scoring_line(rows: pd.DataFrame) -> str:
    unpruned = rows[rows["method"] == UNPRUNED]
    if unpruned.empty or pd.isna(unpruned["prefill_ms"].iloc[0]) or pd.isna(unpruned["last_row_score_ms"].iloc[0]):
        return ""
    u = unpruned.iloc[0]
    share = 100 * u["last_row_score_ms"] / u["prefill_ms"]
    return (
        f"Scoring at layer K-1 = {int(u['layer']) - 1}: AudioMarathon's eager attention matrix costs "
        f"{_cell(u['eager_score_ms'], '{:+.2f}')} ms and {_cell(u['eager_score_extra_gib'], '{:+.2f}')} GiB over sdpa; "
        f"kvprune's last-row scores take {_cell(u['last_row_score_ms'], '{:.2f}')} ms ({_cell(share, '{:.2f}')}% of "
        "the unpruned prefill)."
    )


def _host_speed_line(rows: pd.DataFrame) -> str:
    """How fast the host ran over the rows' rounds: host-bound rows (a pruned prefill's short layers, stock
    decoding) move with it, so rows of runs at different host speeds do not compare."""
    speeds = rows["host_loop_ns"].dropna() if "host_loop_ns" in rows else rows.iloc[:0, 0]
    if speeds.empty:
        return ""
    return (f"Host speed: a fixed Python loop took {speeds.min():.1f}-{speeds.max():.1f} ns per iteration before the "
            f"requests (the rows' medians; median {speeds.median():.1f}). Host-bound times follow it.")


def _uncompiled_line(rows: pd.DataFrame) -> str:
    """The rows whose decoding was to be compiled but ran uncompiled (the engine's step failed to compile for
    their arrangement of layers), and those whose prefill layers >= K were (``--compile-prefill``): their times
    are not the compiled code's."""
    def fell(column: str) -> str:
        rows_fell = rows[rows[column].fillna(False).astype(bool)] if column in rows else rows.iloc[:0]
        return ", ".join(f"{r.method} {r.ratio:g} at batch {r.batch:g}" for r in rows_fell.itertuples())

    decode, prefill = fell("decode_fell_back"), fell("prefill_fell_back")
    lines = [f"Decoding uncompiled (the compiled step failed for their arrangement of layers: the error is in the log; "
             f"the step ran as written, in a CUDA graph where one was captured): {decode}." if decode else "",
             f"Prefill layers >= K uncompiled (they failed to compile: the warning is in the log; they ran as written): "
             f"{prefill}." if prefill else ""]
    return " ".join(line for line in lines if line)


def _largest_batch_table(rows: pd.DataFrame) -> str:
    if "max_batch" not in rows or rows["max_batch"].isna().all():
        return "Largest batch: not searched (`--largest-batch`, on CUDA, where memory is measured)."
    largest = rows.drop_duplicates(["method", "ratio"])
    columns = {
        "method": _column("method", str), "ratio": _column("ratio", "{:g}"),
        "largest batch that ran": _column("max_batch", "{:.0f}"), "predicted": _column("max_batch_predicted", "{:.0f}"),
        "decoded tokens/s": _column("max_batch_decode_tokens_per_s", "{:,.0f}"),
        "requests/s": _column("max_batch_requests_per_s", "{:.2f}"), "step ms": _column("max_batch_step_ms", "{:.2f}"),
        "matmul bound ms": _column("max_batch_matmul_bound_ms", "{:.2f}"),
        "bytes bound ms": _column("max_batch_bytes_bound_ms", "{:.2f}"),
        "step / larger bound": _column("max_batch_vs_bound", "{:.2f}x"),
        "sequential bound ms": _column("max_batch_sequential_bound_ms", "{:.2f}"),
        "step / sequential": _column("max_batch_vs_sequential", "{:.2f}x"), "tries": _column("max_batch_tries", str),
    }
    table = ("Largest batch that fits (predicted from the peaks above, then searched from the prediction, down while "
             "nothing runs, up while each size runs, then halved between; each size in `tries`; its throughput from a "
             "second, warm run). "
             "Its decode step beside its two bounds: the step's matrix products at the matrix rate and its bytes "
             "(weights, every row's keys and values) at the copy bandwidth, both measured in this run; and beside "
             "its sequential bound, what a step takes whose products and attention run one after the other: the "
             "products (or the weights' bytes they read, whichever is longer) plus the keys' and values' bytes:\n\n")
    return table + _table(largest, columns) + _largest_batch_gain(largest)


def _largest_batch_gain(largest: pd.DataFrame) -> str:
    """Each press's decoding throughput at its largest batch over the unpruned model's at its own."""
    unpruned = largest[largest["method"] == UNPRUNED]["max_batch_decode_tokens_per_s"]
    if unpruned.empty or pd.isna(unpruned.iloc[0]):
        return ""
    lines = [f"- {row['method']} at {row['ratio']:g}: {row['max_batch_decode_tokens_per_s'] / unpruned.iloc[0]:.2f}x the unpruned "
             "model's decoded tokens/s, each at its largest batch"
             for _, row in largest.iterrows() if row["method"] != UNPRUNED and not pd.isna(row["max_batch_decode_tokens_per_s"])]
    return "\n\n" + "\n".join(lines) if lines else ""


def _targets_table(rows: pd.DataFrame) -> str:
    found = targets(rows)
    if not found:
        return ""
    columns = {name: _column(name, str) for name in ("target", "measured", "bound", "met")}
    return ("Targets (the family's, set for 5 min of audio, `compare.TARGETS`; ratios against the stock rows above):\n\n"
            + _table(pd.DataFrame(found), columns))


def _decoding(row) -> str:
    if pd.isna(row["cache"]):
        return "not measured"
    return f"{row['cache']} cache" + compiled_words(row, ", compiled decoding")


HEADER = {
    "ratios": [
        "- ideal at ratio r = a real prefill whose layers >= K (and LM head) run on the first positions of the "
        "prompt, as many as a press at r keeps, for free: no scoring, no gather; made as the presses' prefills "
        "are (the engine's prefill call beside presses on the engine). A press row whose LLM part is "
        "below its ideal's by more than twice their combined spread (and 1%) is marked **below ideal**",
        "- LLM ms = prefill minus its own encoder time, per round; score ms = the engine's own work inside the "
        "prefill (a token press's choice and gather at layer K, a cache press's eviction after each layer), "
        "with its share of the prefill",
    ],
    "batch": ["- every row of a batch holds the same prompt; requests/s = batch / (prefill + decoding)",
              "- each decode step beside its bounds: its matrix products at the matrix rate and its bytes (weights, "
              "every row's keys and values) at the copy bandwidth, both measured in this run; and beside its "
              "sequential bound: the products (or the weights' bytes, if longer) then the keys' and values' bytes"],
    "compare": [
        "- whole generate calls; stock HF = no kvprune at all (stock audio encoder); the ideal is a prefill bound",
    ],
}


def markdown(frame: pd.DataFrame) -> str:
    first = frame.iloc[0]
    mode = first["mode"]
    lines = [
        f"# kvprune bench ({mode})",
        "",
        f"- card: {first['card']} ({first['device']}, {first['dtype']}, attention {first['attn']})",
        f"- torch {first['torch']}, transformers {first['transformers']}, kvprune {first['kvprune']}; {first['date']}",
        f"- command: `{first['command']}`",
        f"- medians of {first['repeats']} rounds after {first['warmup']} warm-up rounds (which absorb compilation); "
        "each round runs every request once, starting one place later each round; a round whose encoder time "
        f"is an outlier, or whose LLM part stalled (over {STALL_FACTOR:g}x the request's fastest round), is left out for "
        "that request; decode = "
        f"{first['decode_tokens']} tokens",
        "- random weights built from each architecture's config (timing depends on shapes, not values)",
        "- KV MiB = the entries the cache holds after the prefill (a static cache's room for new tokens is in "
        "kv_alloc_bytes); decoding on the cache named in the cache column (static: compiled on a GPU)",
        *HEADER[mode],
    ]
    for (preset, seconds), rows in frame.groupby(GROUP, sort=False):
        head = rows.iloc[0]
        note = PRESETS.get(preset).note if preset in PRESETS else ""
        decoding = "" if mode == "compare" else f", {_decoding(head)}"
        lines += [
            "",
            f"## {preset}: {seconds:g} s of audio ({_cell(head['audio_tokens'], '{:.0f}')} audio tokens, "
            f"{_cell(head['seq_len'], '{:.0f}')} prompt tokens, K = {_cell(head['layer'], '{:.0f}')}{decoding})",
        ]
        if note:
            lines += ["", f"*{preset}: {note}.*"]
        lines += ["", _table(rows, TABLES[mode])]
        for extra in (bound_line(rows), _scoring_line(rows), _host_speed_line(rows),
                      _uncompiled_line(rows) if mode != "compare" else "",  # compare: in each label
                      _largest_batch_table(rows) if mode == "batch" else "",
                      _targets_table(rows) if mode == "compare" else ""):
            if extra:
                lines += ["", extra]
    below = frame[frame["below_ideal"]]
    if not below.empty:
        lines += ["", "## Faster than the ideal beyond noise (a measurement problem: look at these rows)", ""]
        lines += [f"- {r.preset} {r.audio_seconds:g} s {r.method} {r.ratio:g}: LLM {r.llm_ms:.1f} ms against the "
                  f"ideal's {r.ideal_llm_ms:.1f} ms" for r in below.itertuples()]
    lines += below_floor_lines(frame)
    compiling = frame[frame["compiled_in_timing"].eq(True)]
    if not compiling.empty:
        lines += ["", "## Compiled during timed rounds (too few warm-up rounds: these timings include compilation)", ""]
        lines += [f"- {r.preset} {r.audio_seconds:g} s {r.method} {r.ratio:g} batch {r.batch}" for r in compiling.itertuples()]
    errors = frame[frame["error"].notna()]
    if not errors.empty:
        lines += ["", "## Errors", ""]
        lines += [f"- {r.preset} {r.audio_seconds:g} s {r.method} {r.ratio:g}: {r.error}" for r in errors.itertuples()]
    return "\n".join(lines) + "\n"
