"""What the model received, said at the top of report.md when it was not the whole input: audio cut
to fit the model (``long_audio``), prompts without their audio (``--no-audio``: ``audio_input``, a
caption in its place where the task has one) and videos whose file has no sound track
(``silent_videos``). Each banner counts samples, per task where it matters."""

from __future__ import annotations

import pandas as pd

from .headline import INPUT_LABELS, NOTHING_PRUNED

SAMPLE = ["model", "task", "sample_id"]


def input_banners(results: pd.DataFrame) -> list[str]:
    """The banners that apply to ``results`` (none when every model got every input whole)."""
    return [banner for banner in (no_audio_banner(results), silent_video_banner(results), long_audio_banner(results)) if banner]


def long_audio_banner(results: pd.DataFrame) -> str:
    """A note on the samples whose audio was split or truncated to fit the model."""
    if "long_audio" not in results:
        return ""
    notes = results.drop_duplicates(subset=SAMPLE)["long_audio"].dropna()
    if notes.empty:
        return ""
    cut = notes.str.contains("truncated|kept about").sum()
    lines = [f"> **Long audio: {len(notes)} sample(s) did not fit the model as one clip.**"]
    if cut:
        lines.append(f"> {cut} of them were truncated: the model heard only part of their audio "
                     "(`audio_seconds_received` in results.jsonl).")
    for note, count in notes.value_counts().head(5).items():
        lines.append(f"> - {count} × {note}")
    return "\n".join(lines) + "\n"


def no_audio_banner(results: pd.DataFrame) -> str:
    """An ablation's banner: the prompts held no audio (``--no-audio``), per task what stood in its place."""
    if "audio_input" not in results or not results["audio_input"].isin(["none", "caption"]).any():
        return ""
    samples = results.drop_duplicates(subset=SAMPLE)
    lines = ["> **No audio (`--no-audio`): an ablation, not a pruning result.** These runs' prompts held none of their "
             "audio (videos went in without their sound track); their rows are labelled "
             f"`[{INPUT_LABELS['none']}]` or `[{INPUT_LABELS['caption']}]` (`audio_input` in results.jsonl and "
             "summary.csv). A press that prunes audio had nothing to remove: its prefill speedup is shown as "
             f"`{NOTHING_PRUNED}`.\n>"]
    for task, rows in samples.groupby("task", sort=True):
        counts = rows["audio_input"].value_counts()
        parts = [f"the task's caption in place of the audio in {counts['caption']}" if "caption" in counts else "",
                 f"no audio at all in {counts['none']}" if "none" in counts else ""]
        lines.append(f"> - {task}: " + ", ".join(p for p in parts if p) + f" of {len(rows)} sample(s)")
    return "\n".join(lines) + "\n"


def silent_video_banner(results: pd.DataFrame) -> str:
    """A note on the samples whose video was to bring its sound track but whose file has none: the
    model saw it silent, so the answer did not hear it."""
    if "silent_videos" not in results:
        return ""
    samples = results.drop_duplicates(subset=SAMPLE).dropna(subset=["silent_videos"])
    silent = samples[pd.to_numeric(samples["silent_videos"]) > 0]
    if silent.empty:
        return ""
    lines = [f"> **Videos without a sound track: {len(silent)} sample(s) showed a video whose file has none**, where the "
             "task gives the model each video with its sound: the model saw it silent, so its answer heard nothing "
             "(`silent_videos` in results.jsonl).\n>"]
    for task, rows in samples.groupby("task", sort=True):
        count = int((pd.to_numeric(rows["silent_videos"]) > 0).sum())
        if count:
            lines.append(f"> - {task}: {count} of {len(rows)} sample(s) with a video")
    return "\n".join(lines) + "\n"
