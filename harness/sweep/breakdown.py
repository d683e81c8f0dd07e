"""Scores per metadata value and per suite: ``breakdown.csv`` and the report's breakdown sections.

A task's ``breakdown_by`` fields (category, sub-category, difficulty, modality...) split its rows by
the item's value of that field (``a+b``: by the pair of values, as a paper's table crosses two
fields: ST-AudioQA's family and attribute); each part is scored with the task's own metrics, so a metric that
works per item or per sub-category (STAR-Bench's perception parts average their sub-categories)
does so within the part, as the official tables do; ``samples`` counts its runs, ``items`` its
distinct items. Rows whose item has no value for the field are left out of that field's table. A
field whose groups count whole (``breakdown_whole``: STAR-Bench perception's categories, made of
sub-categories) scores each group under the value of its first row (a row of no group under none),
yet counts ``samples`` and ``items`` over the rows labelled with the value, and ``n_<group field>``
the groups it scored, as ``PerceptionDataset.evaluate`` fills its cells: where a group's rows carry
two values, the rows scored under a value and the rows counted differ.

A suite with an ``aggregate`` (``tasks.suites``) adds one row per model x method x ratio that ran
all its tasks: the mean of each aggregated metric over them (STAR-Bench's Final MA). A suite with
``groups`` or ``levels`` adds one row per group (AudioMarathon's categories) or level (AVI-Bench's
stages, Overall, L1) and model x method x ratio. Every task whose samples span two duration buckets
is also scored per bucket, and AudioMarathon's suite over its tasks together (``analyses``: field
``audio duration``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd

from ..markdown import markdown_table
from ..tasks.metrics import row_meta
from ..tasks.suites import SUITE_LEVELS, Suite, list_suites
from ..tasks.task import Task, get_task
from .analyses import duration_breakdown
from .config import BASELINE
from .summary import GROUP, distinguish_labels, scoring_passes

SUITE_FIELD = "suite"
LEVELS_FIELD = "levels"
GROUPS_FIELD = "groups"


def breakdown_table(results: pd.DataFrame, tasks: Mapping[str, Task], summary: pd.DataFrame) -> pd.DataFrame:
    """The breakdown table of a sweep's results (as its summary read them, with ``summary`` for the
    suites): what ``breakdown.csv`` holds."""
    suites = list_suites()
    results, _ = scoring_passes(results)  # every sample once: not the timing subset's repeats
    return pd.concat([breakdown(results, tasks), duration_breakdown(results, tasks, suites), suite_scores(summary, suites),
                      suite_groups(summary, suites), suite_levels(results, tasks, summary, suites)], ignore_index=True)


def breakdown(results: pd.DataFrame, tasks: Mapping[str, Task] | None = None) -> pd.DataFrame:
    """One row per run identity (model x task x method spec x settings x ratio, as the summary groups
    them) x breakdown field x value: ``samples`` and the task's metrics on those rows (``score``: the
    primary one)."""
    tasks = tasks or {}
    results = results.reindex(columns=list(dict.fromkeys([*results.columns, *GROUP])))  # older rows lack identity fields
    rows = []
    for (model, task_name, method, layer, method_id, settings_id, ratio), group in results.groupby(GROUP, sort=True, dropna=False):
        task = tasks[task_name] if task_name in tasks else get_task(task_name)
        records = group.to_dict("records")
        identity = dict(model=model, task=task_name, method=method, ratio=ratio, layer=None if pd.isna(layer) else int(layer),
                        method_id=method_id, settings_id=settings_id)
        for field in task.breakdown_by:
            whole = task.breakdown_whole.get(field)
            labels = [_field_value(row_meta(record), field) for record in records]
            groups = [_field_value(row_meta(record), whole) for record in records] if whole else labels
            scored = labels if whole is None else _scored_under(records, labels, groups)
            scored_under, labelled_under = _by_value(scored), _by_value(labels)
            for value in sorted(scored_under):
                subset = scored_under[value]
                labelled = [records[i] for i in labelled_under.get(value, [])]
                metrics = task.summarize([records[i] for i in subset])
                wholes = {f"n_{whole}": len({_text(groups[i]) for i in subset})} if whole else {}
                rows.append(dict(identity, field=field, value=value, samples=len(labelled),
                                 items=len({r.get("item", index) for index, r in enumerate(labelled)}), **wholes, metric=task.primary_metric,
                                 score=metrics[task.primary_metric], **metrics))
    return distinguish_labels(pd.DataFrame(rows)) if rows else pd.DataFrame(rows)


def _by_value(values: list) -> dict[str, list[int]]:
    """The indices of ``values`` under each value's text, in order (None: under none)."""
    indices: dict[str, list[int]] = {}
    for index, value in enumerate(values):
        if value is not None:
            indices.setdefault(_text(value), []).append(index)
    return indices


def _scored_under(records: list[dict], labels: list, groups: list) -> list:
    """The value each record is scored under when its ``whole`` group (``groups``) counts whole: the
    label of the group's first record in sample order; none for a record without a group. So
    STAR-Bench's perception table scores each sub-category under its first row's category, and only
    sub-categories."""
    first: dict[str, object] = {}
    for index in sorted(range(len(records)), key=lambda i: _position(records[i])):
        if groups[index] is not None:
            first.setdefault(_text(groups[index]), labels[index])
    return [None if group is None else first[_text(group)] for group in groups]


def _position(record: dict) -> float:
    position = record.get("position")
    return position if isinstance(position, (int, float)) and not pd.isna(position) else float("inf")


def suite_scores(summary: pd.DataFrame, suites: list[Suite]) -> pd.DataFrame:
    """Per suite with an aggregate, model, method and ratio that ran all its tasks: the mean of each
    aggregated metric over the suite's tasks (``task`` holds the suite's name), and ``samples``, the
    items of all its tasks (an item run several times counts once, as STAR-Bench's Final MA counts)."""
    rows = []
    for suite in suites:
        if not suite.aggregate or summary.empty:
            continue
        ran = summary[summary["task"].isin(suite.tasks)]
        for (model, method, ratio), frame in ran.groupby(["model", "method", "ratio"], sort=True):
            if set(frame["task"]) != set(suite.tasks):
                continue
            scores = {metric: frame[metric].mean() for metric in suite.aggregate}
            items = frame["items"] if "items" in frame else frame["samples"]  # summaries of older versions
            rows.append(dict(model=model, task=suite.name, method=method, ratio=ratio, field=SUITE_FIELD,
                             value=suite.aggregate_name, samples=int(items.sum()),
                             metric=suite.aggregate[0], score=scores[suite.aggregate[0]], **scores))
    return pd.DataFrame(rows)


def suite_groups(summary: pd.DataFrame, suites: list[Suite]) -> pd.DataFrame:
    """Per suite group, model, method and ratio that ran all the group's tasks: the mean of their
    primary scores (``value``: the group's name)."""
    rows = []
    for suite in suites:
        if not suite.groups or summary.empty:
            continue
        ran = summary.assign(base=summary["task"].str.split("@").str[0])
        for (model, method, ratio), frame in ran.groupby(["model", "method", "ratio"], sort=True):
            for group, members in suite.groups.items():
                chosen = frame[frame["base"].isin(members)]
                if set(chosen["base"]) == set(members):
                    rows.append(dict(model=model, task=suite.name, method=method, ratio=ratio, field=GROUPS_FIELD, value=group,
                                     samples=int(chosen["samples"].sum()), metric=GROUPS_FIELD, score=chosen["score"].mean()))
    return pd.DataFrame(rows)


def suite_levels(results: pd.DataFrame, tasks: Mapping[str, Task], summary: pd.DataFrame, suites: list[Suite]) -> pd.DataFrame:
    """Per suite with ``levels``, model, method and ratio: one row per level its tasks that ran
    give (``value``: the level's name, ``score`` its value)."""
    rows = []
    for suite in suites:
        if suite.levels is None or summary.empty:
            continue
        ran = summary[summary["task"].isin(suite.tasks)]
        for (model, method, ratio), frame in ran.groupby(["model", "method", "ratio"], sort=True):
            names = {name: (tasks[name] if name in tasks else get_task(name)).abbreviation for name in frame["task"]}
            scores = {names[name]: score for name, score in zip(frame["task"], frame["score"])}
            chosen = results[(results["model"] == model) & (results["method"] == method) & (results["ratio"] == ratio)]
            by_task = {names[name]: group.sort_values("position").to_dict("records")
                       for name, group in chosen[chosen["task"].isin(names)].groupby("task")}
            for level, score in SUITE_LEVELS.get(suite.levels)(by_task, scores).items():
                rows.append(dict(model=model, task=suite.name, method=method, ratio=ratio, field=LEVELS_FIELD, value=level,
                                 samples=int(frame["samples"].sum()), metric=LEVELS_FIELD, score=score))
    return pd.DataFrame(rows)


def report_sections(table: pd.DataFrame, tasks: Mapping[str, Task], model: str, judge: str | None = None) -> list[str]:
    """The report's sections for one model: each task's notes (``task_note``: as the sweep's
    ``judge`` graded it), then per task and field a table of the primary score per value (rows) and
    run (columns), then the suites' aggregates."""
    parts = []
    for name, task in sorted(tasks.items()):
        if note := task_note(task, judge):
            parts.append(f"**{name}**: {note}\n")
    if table.empty:
        return parts
    table = table[table["model"] == model]
    named = [SUITE_FIELD, LEVELS_FIELD, GROUPS_FIELD]
    for (task, field), rows in table[~table["field"].isin(named)].groupby(["task", "field"], sort=True):
        metric = rows["metric"].iloc[0]
        parts.append(f"#### {task} by {field} ({metric})\n\n" + _pivot(rows, "value"))
    suite_notes = {suite.name: suite.notes for suite in list_suites()}
    for (suite, field), rows in table[table["field"].isin([GROUPS_FIELD, LEVELS_FIELD])].groupby(["task", "field"], sort=True):
        notes = suite_notes.get(suite, "").strip()
        what = "categories (the mean of their tasks' primary scores)" if field == GROUPS_FIELD else "levels"
        parts.append(f"#### {suite}: {what}\n\n" + (f"{notes}\n\n" if notes else "") + _pivot(rows, "value"))
    for suite, rows in table[table["field"] == SUITE_FIELD].groupby("task", sort=True):
        name = rows["value"].iloc[0]
        metrics = [c for c in rows.columns if c not in _NOT_METRICS and rows[c].notna().any()]
        parts.append(f"#### {suite}: {name} over its tasks\n\n" + _suite_table(rows, metrics))
    return parts


def task_note(task: Task, judge: str | None) -> str:
    """What a reader of the task's results must know: its notes, which for a task with a refine step
    say what scoring without the judge means; when the sweep had a judge, that the judge ran it."""
    if task.refine and judge:
        return (f"graded with --judge {judge}: as in {task.benchmark or 'the benchmark'}'s official pipeline, the judge "
                "rewrites each reply of a task the refine step covers before it is scored; a reply it could not refine is "
                "an error row, never scored as it was.")
    return task.notes.strip()


#: besides ``samples``, a breakdown table shows a value's distinct items where items ran several times, the
#: groups a whole-counted value scored (``n_<group field>``: STAR-Bench perception's sub-categories per
#: category), the tasks a suite's duration bucket holds (``tasks``)
_NOT_METRICS = {"model", "task", "method", "ratio", "layer", "method_id", "settings_id", "field", "value", "samples", "metric",
                "score", "items", "tasks"}


def _run_label(method: str, ratio: float) -> str:
    return "baseline" if method == BASELINE else f"{method} {ratio:g}"


def _pivot(rows: pd.DataFrame, index: str) -> str:
    runs = rows.assign(run=[_run_label(m, r) for m, r in zip(rows["method"], rows["ratio"])])
    order = sorted(set(runs["run"]), key=lambda run: (run != "baseline", run))
    values = list(dict.fromkeys(runs[index]))  # in the order the rows came (sorted values; groups as the suite lists them)
    table = runs.pivot_table(index=index, columns="run", values="score", aggfunc="first").reindex(index=values, columns=order)
    first = runs[runs["run"] == order[0]].drop_duplicates(index).set_index(index)
    shown = ["items", *sorted(c for c in first.columns if c.startswith("n_")), "tasks"]
    counts = ["samples", *(c for c in shown if c in first and first[c].notna().any() and _differs(first, c))]
    cells = ([str(value), *(_count(first[c].get(value)) for c in counts), *map(_cell, values)]
             for value, values in zip(table.index, table.to_numpy()))
    return markdown_table([index, *counts, *order], cells) + "\n"


def _differs(rows: pd.DataFrame, column: str) -> bool:
    """Whether ``column`` says something ``samples`` does not (items: where some item ran several times)."""
    return column != "items" or bool((rows["items"] != rows["samples"]).any())


def _count(value) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "—"
    return value if isinstance(value, str) else str(int(value))


def _suite_table(rows: pd.DataFrame, metrics: list[str]) -> str:
    ordered = rows.assign(_base=rows["method"] != BASELINE).sort_values(["_base", "method", "ratio"])
    cells = ([str(r["method"]), f"{r['ratio']:g}", str(r["samples"]), *(_cell(r[m]) for m in metrics)] for _, r in ordered.iterrows())
    return markdown_table(["method", "ratio", "samples", *metrics], cells) + "\n"


def _cell(value) -> str:
    return "—" if value is None or pd.isna(value) else f"{value:.2f}"


def _field_value(meta: dict, field: str):
    """The item's value of a breakdown field; of ``a+b``, its values joined (None if one is missing)."""
    values = [meta.get(name) for name in field.split("+")]
    if any(value is None for value in values):
        return None
    return values[0] if len(values) == 1 else " / ".join(_text(value) for value in values)


def _text(value) -> str:
    """A metadata value as a table key (lists, as MMAU's category sometimes is, as JSON)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
