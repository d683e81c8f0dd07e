"""Building a task's parts from the fields of its resolved config (``task.task_from_config``): the
layout, the prompt, the channel policy, the variant, the metric options and the breakdowns, each
failing with a ``TaskConfigError`` that names the field and the fix."""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import fields

from ..channels import MEAN, Channels
from .config_files import TaskConfigError
from .dataset_layouts import LAYOUTS, Layout
from .metrics import METRICS
from .prompts import PromptConfigError, PromptSpec
from .variants import VARIANTS, Variant


def build_layout(name: str, options: dict, fail: Callable[..., TaskConfigError]) -> Layout:
    if name not in LAYOUTS:
        raise fail(f"unknown {name!r}; choose from {sorted(LAYOUTS)}", "layout")
    allowed = [f.name for f in fields(LAYOUTS.get(name))]
    try:
        return LAYOUTS.get(name)(**options)
    except (TypeError, ValueError) as error:
        raise fail(f"{error} (layout {name!r} takes {allowed})", "layout_options") from None


def build_prompt(raw: dict, fail: Callable[..., TaskConfigError]) -> PromptSpec:
    try:
        return PromptSpec.from_config(raw["prompt"], raw.get("system"), raw.get("option_format"), raw.get("option_separator"),
                                      raw.get("caption"), raw.get("transcription"))
    except PromptConfigError as error:
        key = next((k for k in ("option_format", "caption", "transcription") if str(error).startswith(k)), "prompt")
        raise fail(str(error), key) from None


def build_channels(value, fail: Callable[..., TaskConfigError]) -> Channels:
    try:
        return MEAN if value is None else Channels.from_config(value)
    except (TypeError, ValueError) as error:
        raise fail(str(error), "channels") from None


def build_variant(value, fail: Callable[..., TaskConfigError]) -> Variant | None:
    if value is None:
        return None
    options = {"name": value} if isinstance(value, str) else dict(value)
    name = options.pop("name", None)
    if name not in VARIANTS:
        raise fail(f"unknown {name!r}; choose from {sorted(VARIANTS)} (a name, or {{name: ..., <options>}})", "variants")
    try:
        return VARIANTS.get(name)(**options)
    except (TypeError, ValueError) as error:
        allowed = [f.name for f in fields(VARIANTS.get(name))]
        raise fail(f"{error} (variant {name!r} takes {allowed})", "variants") from None


def metric_options(raw: dict, metrics: tuple[str, ...], fail: Callable[..., TaskConfigError]) -> dict:
    options = raw.get("metric_options") or {}
    taken = {key for name in metrics for key in METRICS.get(name).options}
    unused = sorted(set(options) - taken)
    if unused:
        raise fail(f"no metric of this task takes {unused} (they take {sorted(taken) or 'none'})", "metric_options")
    missing = sorted(taken - set(options))
    if missing:
        users = [name for name in metrics if set(METRICS.get(name).options) & set(missing)]
        raise fail(f"metrics {users} need {missing}", "metric_options")
    for name in metrics:
        for key, allowed in METRICS.get(name).options.items():
            if allowed is not None and options[key] not in allowed:
                raise fail(f"{key}={options[key]!r} is not one of {list(allowed)}", "metric_options")
    return dict(options)


def breakdown(value: list, fail: Callable[..., TaskConfigError]) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v for v in value):
        raise fail("expected a list of metadata field names", "breakdown_by")
    return tuple(value)


def check_fields(task, fail: Callable[..., TaskConfigError]) -> None:
    """What the fields of ``task`` (the ``Task`` being built) name exists: breakdown_whole's fields in
    breakdown_by, failed_reply's only {error}, the prompt's and breakdowns' fields in what the layout
    keeps (when it says which)."""
    strays = sorted(str(name) for pair in task.breakdown_whole.items() for name in pair if name not in task.breakdown_by)
    if strays:
        raise fail(f"names {strays}, which breakdown_by does not list: map a breakdown field to another", "breakdown_whole")
    reply = task.failed_reply or ""
    if {name for _, name, _, _ in string.Formatter().parse(reply) if name is not None} - {"error"}:
        raise fail(f"{reply!r} may name only {{error}}, the failed run's error message", "failed_reply")
    kept = task.layout.metadata_fields()
    if kept is None:
        return
    kept |= {"run", "runs", "clip_order"} if task.variant is not None else set()
    crossed = {name for field in task.breakdown_by for name in field.split("+")}
    for key, wanted in (("prompt", task.prompt.fields_used()), ("breakdown_by", crossed)):
        missing = sorted(wanted - kept)
        if missing:
            raise fail(f"names {missing}, which the layout does not keep: add them to layout_options.meta_fields "
                       f"(kept: {sorted(kept) or 'none'})", key)
    named = task.prompt.named_audio - set(task.layout.audio_names())
    if named:
        raise fail(f"audio segment(s) {sorted(named)} name audio the layout does not keep: add them to "
                   "layout_options.named_audio", "prompt")

