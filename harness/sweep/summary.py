"""One row per model x task x method x ratio: the task's metrics and the timing statistics.

Rows are grouped by every field of a run's identity (``identity``): model, task, method label, its
layer and full spec (``method_id``), the settings (``settings_id``) and the ratio, so results of two
layers or two configurations are never blended; a label shared by two specs is shown with what
tells them apart (``fastv (layer 3)``). A folder is summarised as its last sweep asked for
(``plan.json``): exactly its models, tasks, methods, ratios and samples (what else the folder holds:
``held``).

Metrics use every sample, failed ones included (an error is an unanswered question, which each metric
counts wrong or leaves out as its benchmark does: ``Metric.no_answer``, said by ``failure_effect``),
and are those of each task as the sweep ran it (its config recorded in ``runs.jsonl``), so a folder still
summarises after its task was renamed or edited. Timings use only samples that ran and were not the
warm-up, and not calls that compiled (a static cache on a GPU compiles at every new length). Speedups
and KV savings compare medians with the unpruned baseline of the same model, task and settings; KV
savings compare the entries held after the prefill (a static cache's preallocated room left out). The
spread of the per-sample speedups (each sample against its own baseline run) says whether a speedup
stands out of the timing noise. Audio and video tokens (and those kept) are counted apart; a pruned
run that removed none and saved no KV cache is ``nothing_pruned`` (its speedup is timing noise), and
``audio_input`` says what stood for the audio under ``--no-audio``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from ..tasks.metrics import METRICS, NO_ANSWER
from ..tasks.task import Task, get_task
from .config import BASELINE
from .identity import SweepPlan, read_plan
from .rows import ResultRow, results_frame
from .store import TIMING_PASS, read_rows, recorded_tasks, unique_runs

GROUP = ["model", "task", "method", "layer", "method_id", "settings_id", "ratio"]
MS = 1000.0
MIB = 2**20
AUDIO_FIELDS = ["audio_seconds", "audio_tokens", "kept_tokens", "video_tokens", "kept_video_tokens", "audio_input"]
AUDIO = "audio"  # the prompts held their audio (``audio_input`` of rows without the field: every sweep but --no-audio)
MIN_PAIRS = 3  # timed samples a speedup needs before it can stand out of the noise
TIMING_SUBSET = "timing subset"
EVERY_SAMPLE = "every sample"
NOT_TIMED = "none"  # a batched or sharing scoring pass and no timing subset (--timing-samples 0)


def summarize_folder(out_dir: Path | str, everything: bool = False) -> pd.DataFrame:
    """The summary table of a sweep folder, with the tasks as it recorded them: the runs its last
    sweep asked for, or (``everything``) every run it holds, grouped by identity."""
    return summarize(folder_results(out_dir, everything), recorded_tasks(out_dir))


def folder_results(out_dir: Path | str, everything: bool = False) -> pd.DataFrame:
    """The results a summary of ``out_dir`` reads: one row per run (a retried error replaced by its
    retry), restricted to the folder's plan (scored against its samples' labels as they are now), or
    with ``everything`` every run the folder holds but those of samples changed since."""
    return select_results(out_dir, read_rows(Path(out_dir)), read_plan(out_dir), everything)


def select_results(out_dir: Path | str, rows: list[ResultRow], plan: SweepPlan | None, everything: bool = False) -> pd.DataFrame:
    """``folder_results`` of the ``rows`` and ``plan`` already read from ``out_dir``."""
    if plan is not None:  # what the plan asks for, or everything but the rows of samples changed since
        rows = plan.current(rows) if everything else plan.select(rows)
    rows = unique_runs(rows)
    plan = None if everything else plan
    if not rows:
        what = "results*.jsonl written by `kvprune sweep`" if plan is None else "results of the runs plan.json asks for"
        raise FileNotFoundError(f"no results in {out_dir}: expected {what} (`kvprune report --all` summarises every result)")
    return results_frame(rows)


def summarize(results: pd.DataFrame, tasks: Mapping[str, Task] | None = None) -> pd.DataFrame:
    """The summary table of a results table (as ``read_results`` returns it). ``tasks``: the tasks
    by name as they ran (``recorded_tasks``); a name missing there is looked up with ``get_task``."""
    tasks = tasks or {}
    # older folders lack some identity fields; a sample whose audio failed to load has no audio fields
    results = results.reindex(columns=list(dict.fromkeys([*results.columns, *GROUP, *AUDIO_FIELDS])))
    rows = []
    for (model, task_name, method, layer, method_id, settings_id, ratio), group in results.groupby(GROUP, sort=True, dropna=False):
        task = tasks[task_name] if task_name in tasks else get_task(task_name)
        scoring, timing = scoring_passes(group)
        metrics = task.summarize(scoring.to_dict("records"))
        timed = _timed(timing if len(timing) else scoring)
        per_token = timed["decode_s"] / (timed["new_tokens"] - 1).where(timed["new_tokens"] > 1)
        rows.append(dict(
            model=model, task=task_name, method=method, ratio=ratio, layer=None if pd.isna(layer) else int(layer),
            method_id=method_id, settings_id=settings_id,
            samples=len(scoring), items=scoring["item"].nunique() if "item" in scoring else len(scoring),
            errors=int(scoring["error"].notna().sum()),
            metric=task.primary_metric, higher_is_better=task.higher_is_better, score=metrics[task.primary_metric],
            **metrics,
            audio_seconds=scoring["audio_seconds"].mean(),
            audio_tokens=scoring["audio_tokens"].mean(),
            kept_tokens=scoring["kept_tokens"].mean(),
            video_tokens=scoring["video_tokens"].mean(),
            kept_video_tokens=scoring["kept_video_tokens"].mean(),
            pruned_tokens=_pruned(scoring),
            audio_input=_audio_input(scoring),
            timed_samples=int(timed["prefill_s"].notna().sum()),
            timing_source=_timing_source(scoring, timing),
            prefill_ms_mean=timed["prefill_s"].mean() * MS,
            prefill_ms_median=timed["prefill_s"].median() * MS,
            decode_ms_mean=timed["decode_s"].mean() * MS,
            decode_ms_median=timed["decode_s"].median() * MS,
            decode_ms_per_token_median=per_token.median() * MS,
            decode_tokens_per_s_median=timed["decode_tokens_per_s"].median(),
            new_tokens_mean=timed["new_tokens"].mean(),
            peak_memory_mib_median=timed["peak_memory_bytes"].median() / MIB,
            kv_cache_mib_median=timed["kv_cache_bytes"].median() / MIB,
            kv_held_mib_median=timed["kv_held_bytes"].median() / MIB,
            cache=_kinds(group),
            **throughput(scoring),
            **batch_agreement(task, scoring, timing),
        ))
    summary = pd.DataFrame(rows)
    summary = _against_baseline(summary)
    summary = summary.merge(timing_spread(results), on=["model", "task", "method_id", "settings_id", "ratio"], how="left")
    return distinguish_labels(summary)


def _pruned(rows: pd.DataFrame) -> float:
    """The mean number of tokens the runs' presses removed, audio and visual together (0 for a run whose
    scope held nothing: a prompt without audio under an audio press)."""
    audio = pd.to_numeric(rows["audio_tokens"], errors="coerce") - pd.to_numeric(rows["kept_tokens"], errors="coerce")
    visual = pd.to_numeric(rows["video_tokens"], errors="coerce") - pd.to_numeric(rows["kept_video_tokens"], errors="coerce")
    return float((audio.fillna(0) + visual.fillna(0)).mean())


def _audio_input(rows: pd.DataFrame) -> str:
    """What stood for the audio in the group's prompts: ``audio``, ``none`` (``--no-audio``),
    ``caption`` (the task's caption in its place), or both of the last two joined by ``+``."""
    return "+".join(sorted(set(rows["audio_input"].astype(object).fillna(AUDIO)))) or AUDIO


def _timing_source(scoring: pd.DataFrame, timing: pd.DataFrame) -> str:
    """Where a group's timings come from: the timing subset, every sample (the scoring pass timed
    each), or nowhere (no row holds a per-sample prefill time)."""
    if len(timing):
        return TIMING_SUBSET
    return EVERY_SAMPLE if "prefill_s" in scoring and scoring["prefill_s"].notna().any() else NOT_TIMED


def scoring_passes(group: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows that score (every sample once) and the timing subset's rows (``pass: timing``)."""
    timing = group["pass"].eq(TIMING_PASS) if "pass" in group else pd.Series(False, index=group.index)
    return group.loc[~timing], group.loc[timing]


def throughput(scoring: pd.DataFrame) -> dict:
    """Samples and generated tokens per second of the batched calls that made ``scoring``'s rows (each
    batch's time counted once), and their mean batch size; NaN where rows were timed one by one."""
    columns = ["batch_id", "batch_prefill_s", "batch_decode_s", "batch_size"]
    batched = scoring.reindex(columns=[*columns, "new_tokens"]).dropna(subset=["batch_id", "batch_prefill_s"])
    if batched.empty:
        return dict(batch_size_mean=float("nan"), samples_per_s=float("nan"), tokens_per_s=float("nan"))
    calls = batched.drop_duplicates("batch_id")
    seconds = pd.to_numeric(calls["batch_prefill_s"]).sum() + pd.to_numeric(calls["batch_decode_s"]).sum()
    return dict(
        batch_size_mean=len(batched) / len(calls),
        samples_per_s=len(batched) / seconds if seconds > 0 else float("nan"),
        tokens_per_s=pd.to_numeric(batched["new_tokens"]).sum() / seconds if seconds > 0 else float("nan"),
    )


def batch_agreement(task: Task, scoring: pd.DataFrame, timing: pd.DataFrame) -> dict:
    """On the timing subset, which ran each sample alone: the share of its answers the scoring pass
    (batched, sharing) gave identically, and its score there minus the subset's own score."""
    columns = ["sample_id", "output"]
    if timing.empty or not {"sample_id", "output"} <= set(scoring.columns):
        return dict(batch_identical=float("nan"), batch_score_change=float("nan"))
    paired = timing[columns].merge(scoring[columns], on="sample_id", suffixes=("_alone", "_batched"))
    if paired.empty:
        return dict(batch_identical=float("nan"), batch_score_change=float("nan"))
    same = (paired["output_alone"] == paired["output_batched"]).mean()
    subset = scoring[scoring["sample_id"].isin(paired["sample_id"])]
    batched = task.summarize(subset.to_dict("records"))[task.primary_metric]
    alone = task.summarize(timing[timing["sample_id"].isin(paired["sample_id"])].to_dict("records"))[task.primary_metric]
    return dict(batch_identical=same, batch_score_change=batched - alone)


def _timeable(rows: pd.DataFrame) -> pd.Series:
    """The runs whose timings count: they ran, were not the warm-up and compiled nothing."""
    return rows["error"].isna() & ~rows["warmup"].astype(bool) & ~_flag(rows, "compiled")


def _timed(group: pd.DataFrame) -> pd.DataFrame:
    ok = _timeable(group)
    columns = ["prefill_s", "decode_s", "new_tokens", "decode_tokens_per_s", "peak_memory_bytes", "kv_cache_bytes",
               "kv_held_bytes"]
    timed = group.loc[ok].reindex(columns=columns)
    if "kv_held_bytes" not in group:  # results written before held bytes were recorded: dynamic caches
        timed["kv_held_bytes"] = timed["kv_cache_bytes"]
    return timed.apply(pd.to_numeric, errors="coerce")


def _flag(group: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column of the results, False where it is missing (results of older versions)."""
    return group[column].eq(True) if column in group else pd.Series(False, index=group.index)


def _kinds(group: pd.DataFrame) -> str | None:
    """The caches the group's runs decoded on ("static", "dynamic", or both joined by "+")."""
    kinds = group["cache"].dropna().unique() if "cache" in group else []
    return "+".join(sorted(kinds)) or None


def _against_baseline(summary: pd.DataFrame) -> pd.DataFrame:
    compared = ["score", "prefill_ms_median", "decode_ms_per_token_median", "kv_held_mib_median"]
    baseline = summary.loc[summary["method"] == BASELINE, ["model", "task", "settings_id", *compared]]
    merged = summary.merge(baseline, on=["model", "task", "settings_id"], how="left", suffixes=("", "_baseline"))
    merged["prefill_speedup"] = merged["prefill_ms_median_baseline"] / merged["prefill_ms_median"]
    merged["decode_speedup"] = merged["decode_ms_per_token_median_baseline"] / merged["decode_ms_per_token_median"]
    merged["kv_saved"] = 1.0 - merged["kv_held_mib_median"] / merged["kv_held_mib_median_baseline"]
    merged["score_change"] = merged["score"] - merged["score_baseline"]
    # a press that removed no token and saved no KV cache (its scope held nothing: --no-audio under an audio press)
    # has no prefill speedup to show, only timing noise
    merged["nothing_pruned"] = (merged["method"] != BASELINE) & merged["pruned_tokens"].eq(0) & merged["kv_saved"].le(0)
    return merged.drop(columns=[f"{c}_baseline" for c in compared])


def timing_spread(results: pd.DataFrame) -> pd.DataFrame:
    """Per model x task x method x ratio, the quartiles of the per-sample prefill times and of the
    per-sample prefill speedups (each sample's unpruned prefill over its own pruned one, timed back
    to back), and whether the speedups straddle 1: then the difference is within the timing noise
    (``prefill_within_noise``)."""
    keys = ["model", "task", "method_id", "settings_id", "ratio"]
    columns = [*keys, "prefill_ms_q25", "prefill_ms_q75", "prefill_speedup_q25", "prefill_speedup_q75", "prefill_within_noise"]
    if "prefill_s" not in results:
        return pd.DataFrame(columns=columns)
    _, timing = scoring_passes(results)
    timed = (timing if len(timing) else results).copy()
    timed = timed.loc[_timeable(timed)]
    timed["prefill_s"] = pd.to_numeric(timed["prefill_s"], errors="coerce")
    if timed.empty:
        return pd.DataFrame(columns=columns)
    prefill = timed.groupby(keys, dropna=False)["prefill_s"]
    spread = (prefill.quantile(0.25) * MS).rename("prefill_ms_q25").to_frame()
    spread["prefill_ms_q75"] = prefill.quantile(0.75) * MS
    sample = ["model", "task", "settings_id", "sample_id"]
    baseline = timed.loc[timed["method"] == BASELINE, [*sample, "prefill_s"]].rename(columns={"prefill_s": "baseline_s"})
    paired = timed.merge(baseline, on=sample, how="inner")
    speedups = (paired["baseline_s"] / paired["prefill_s"]).groupby([paired[k] for k in keys], dropna=False)
    spread["prefill_speedup_q25"] = speedups.quantile(0.25)
    spread["prefill_speedup_q75"] = speedups.quantile(0.75)
    straddles = (spread["prefill_speedup_q25"] <= 1.0) & (spread["prefill_speedup_q75"] >= 1.0)
    spread["prefill_within_noise"] = straddles | (speedups.count() < MIN_PAIRS)  # too few samples to tell
    spread = spread.reset_index()[columns].astype({"prefill_within_noise": object})
    spread.loc[spread["method_id"] == BASELINE, columns[-3:]] = None  # the baseline against itself says nothing
    return spread


def distinguish_labels(summary: pd.DataFrame) -> pd.DataFrame:
    """Where one method label stands for several full specs (``--layer 2``, then ``--layer 3``),
    show each with its layer (or, when the layers agree, its spec digest), so they never look like
    one method."""
    methods = summary.loc[summary["method"] != BASELINE]
    shared = methods.groupby("method")["method_id"].nunique()
    shared = set(shared[shared > 1].index)
    if not shared:
        return summary
    summary = summary.copy()
    for label in shared:
        rows = summary["method"] == label
        specs = summary.loc[rows, ["layer", "method_id"]].drop_duplicates()
        by_layer = specs["layer"].nunique(dropna=False) == len(specs)  # each layer one spec: the layer tells them apart
        summary.loc[rows, "method"] = [
            f"{label} (layer {layer:.0f})" if by_layer else f"{label} ({method_id[:8]})"
            for layer, method_id in zip(summary.loc[rows, "layer"], summary.loc[rows, "method_id"])
        ]
    return summary


def failures(results: pd.DataFrame) -> tuple[int, int, list[tuple[int, str]]]:
    """(failed runs, all runs, and per kind of error, most frequent first: how many and one message),
    counting the runs that score (a timing subset's rows repeat some of them)."""
    results, _ = scoring_passes(results)
    errors = results["error"].dropna() if "error" in results else pd.Series(dtype=object)
    kinds = []
    # one kind per message once file paths and numbers are blanked out: the same failure on other samples
    shape = errors.str.replace(r"\S*[/\\]\S*", "<path>", regex=True).str.replace(r"\d+(\.\d+)?", "<n>", regex=True)
    for _, messages in errors.groupby(shape, sort=False):
        example = messages.iloc[0]
        kinds.append((len(messages), example if len(example) <= 200 else example[:199] + "…"))
    return len(errors), len(results), sorted(kinds, key=lambda kind: -kind[0])


def failure_effect(results: pd.DataFrame, tasks: Mapping[str, Task] | None = None) -> str:
    """One sentence on what the scores make of the failed runs, by the primary metric of each task
    that has some (``Metric.no_answer``): counted as wrong answers, or left out as the benchmark's
    scorer leaves out a question without an answer; '' when no run failed."""
    scoring, _ = scoring_passes(results)
    failed = scoring.loc[scoring["error"].notna(), "task"].unique() if "error" in scoring else []
    by_rule: dict[str, list[str]] = {}
    for name in sorted(failed):
        task = (tasks or {}).get(name) or get_task(name)
        by_rule.setdefault(METRICS.get(task.primary_metric).no_answer, []).append(name)
    if not by_rule:
        return ""
    if len(by_rule) == 1:
        rule = next(iter(by_rule))
        return f"Each {NO_ANSWER[rule]}" + (" (a score of — means that no run answered)." if rule == "skipped" else ".")
    parts = [f"in {', '.join(names)} {'it' if i else 'a failed run'} {NO_ANSWER[rule]}"
             for i, (rule, names) in enumerate(sorted(by_rule.items(), reverse=True))]  # "wrong" first
    return "; ".join(parts).capitalize() + "."


def task_average(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean primary score and prefill speedup per model x method x ratio over the same tasks for
    every method: those every method of the model ran (``common_tasks``), so that no method's
    average leaves out a hard task another's includes. Tasks whose primary metrics go opposite ways
    (accuracy, WER) are averaged apart."""
    summary = summary[[task in common_tasks(summary, model, higher)
                       for model, task, higher in zip(summary["model"], summary["task"], summary["higher_is_better"])]]
    if "nothing_pruned" in summary:  # a run that pruned nothing has no speedup to average, only timing noise
        summary = summary.assign(prefill_speedup=summary["prefill_speedup"].where(~summary["nothing_pruned"].eq(True)))
    grouped = summary.groupby(["model", "method", "ratio", "higher_is_better"], sort=True)
    average = grouped.agg(score=("score", "mean"), tasks=("task", "nunique"), prefill_ms_median=("prefill_ms_median", "mean"),
                          prefill_speedup=("prefill_speedup", "mean"), samples=("samples", "sum"))
    return average.reset_index()


def common_tasks(summary: pd.DataFrame, model: str, higher_is_better: bool) -> set[str]:
    """The tasks (of one model and metric direction) that every method ran, the baseline included."""
    rows = summary[(summary["model"] == model) & (summary["higher_is_better"] == higher_is_better)]
    per_method = [set(group["task"]) for _, group in rows.groupby("method")]
    return set.intersection(*per_method) if per_method else set()


def task_averages(summary: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``task_average`` split by metric direction (of one model's summary), each with its title:
    how many tasks it averages, and those it leaves out because not every method ran them."""
    average = task_average(summary)
    mixed = average["higher_is_better"].nunique() > 1
    titled = []
    for higher, rows in average.groupby("higher_is_better", sort=False):
        model = rows["model"].iloc[0]
        common = common_tasks(summary, model, higher)
        all_tasks = set(summary.loc[(summary["model"] == model) & (summary["higher_is_better"] == higher), "task"])
        tasks = "the task" if len(common) == 1 else f"the {len(common)} tasks"
        title = f"Average over {tasks} every method ran" + (f", {direction(higher)}" if mixed else "")
        left_out = sorted(all_tasks - common)
        if left_out:
            title += f" ({', '.join(left_out)} left out: not every method ran {'it' if len(left_out) == 1 else 'them'})"
        titled.append((title, rows))
    return titled


def direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"

