"""STAR-Bench, reproduced from InternLM/StarBench ``ALMEval_code`` (``datasets/starbench.py``, ``run.py``).

Parts (dataset aliases) and their metadata files under the dataset root: ``PARTS``. An item has
``id, task, category, sub-category, question, options, answer`` (the gold option's text) and
``audio_paths`` (relative to the dataset root); temporal items add ``global_caption`` and
``uncut_audio_path``. The default benchmark is ``pc`` + ``tr`` + ``sr`` (``starbench_default``).

Robust protocol (``run.py: process_dataset``): every item runs several times, run ``r`` having the id
``"<id>@<r>"``: perception parts (alias starting ``pc``) once per option rotation, every other part
3 times. Rotation ``r`` moves the last ``r`` options to the front (a right rotation); temporal parts
instead reorder their 3 clips by a fixed permutation and recompute the gold answer. The model's
reply is parsed to ``"<A>"``... or ``"Z"`` and compared with the run's gold letter. Scores: AA (mean
accuracy over runs, %) and ACR (% of items right in every run), per part, per category and
sub-category; perception averages over sub-categories; the final MA averages the parts.

Generation in their model wrappers: greedy, 256 new tokens, 1024 when the item's ``task`` contains
"reasoning".
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

PARTS: dict[str, str] = {
    "pc": "meta_info/foundation_perception.json",
    "pc_sp": "meta_info/foundation_perception_spatial.json",
    "pc_nsp": "meta_info/foundation_perception_nonspatial.json",
    "sr": "meta_info/holistic_reasoning_spatial.json",
    "sr_ch": "meta_info/holistic_reasoning_spatial.json",
    "tr": "meta_info/holistic_reasoning_temporal.json",
    "tr_cap": "meta_info/holistic_reasoning_temporal.json",
    "tr_uncut": "meta_info/holistic_reasoning_temporal.json",
}
DEFAULT_PARTS = ("pc", "tr", "sr")
# ``datasets/__init__.py: DATASET_GROUPS``; "spatial_all" names aliases ("sp", "sp_ch") that are not
# parts, so the official ``build_dataset`` fails on it, and ``expand_parts`` refuses it by name.
PART_GROUPS: dict[str, tuple[str, ...]] = {
    "temporal_all": ("tr", "tr_cap", "tr_uncut"),
    "spatial_all": ("sp", "sp_ch"),
    "perception_all": ("pc_sp", "pc_nsp"),
    "starbench_all": ("tr", "tr_cap", "tr_uncut", "sr", "sr_ch", "pc_sp", "pc_nsp"),
    "starbench_default": DEFAULT_PARTS,
}
REASONING_RUNS = 3
NO_ANSWER = "Z"

# ``TemporalReasoningDataset._perm_by_roundrobin``: the clip orders and the sub-task offsets.
CLIP_ORDERS = ((1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1))
TEMPORAL_SUBTASKS = ("OSM", "ISSE", "TAO", "DSS", "ETC")

SPLIT_CHANNEL_DIR = "starbench_audios/holistic_reasoning/spatial_split"
CAPTION_PROMPT = (
    "Here is a caption that describes the full, uncut audio scene to help you reconstruct the original "
    "context: {caption}\n Below are 3 audio clips:\n"
)
UNCUT_BEFORE = "An uncut audio of the entire sound scene is provided:"
UNCUT_AFTER = "\n The three clips are extracted from it, please arrange them in the correct order:\n"
CHANNELS_NOTE = "Audio 1 is the left-ear channel and Audio 2 is the right-ear channel.\n"

Segment = tuple[str, str]  # ("text", text) or ("audio", path), in prompt order


# -- protocol ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run of one item: what the model sees and the gold it is scored against."""

    item_id: str
    rotate_id: int
    options: tuple[str, ...]
    answer: str  # the gold option's text (recomputed for temporal parts)
    answer_letter: str  # "<A>", "<B>"...
    segments: tuple[Segment, ...]
    clip_order: str | None = None  # temporal parts: "2-3-1" = the original clips shown as clips 1, 2, 3

    @property
    def unique_id(self) -> str:
        return f"{self.item_id}@{self.rotate_id}"


def expand_parts(names: Sequence[str]) -> list[str]:
    """``build_dataset``'s reading of ``--data``: each name split at ``+``, stripped and lower-cased;
    a group gives its parts in order; each part once, in first-named order (officially a part named
    a second time is refused as "unknown"; here it is skipped). An unknown name, or a group naming
    something that is not a part, is a ValueError."""
    parts: list[str] = []
    for name in names:
        for sub in (n.strip().lower() for n in name.split("+")):
            members = PART_GROUPS.get(sub, (sub,))
            strays = [m for m in members if m not in PARTS]
            if strays:
                where = f"group {sub!r} names {strays}, which are not parts" if sub in PART_GROUPS else f"unknown part {sub!r}"
                raise ValueError(f"STAR-Bench: {where}; the parts are {sorted(PARTS)}, the groups {sorted(PART_GROUPS)}")
            parts += [m for m in members if m not in parts]
    return parts


def run_count(part: str, item: Mapping, robust: bool = True) -> int:
    """Runs of an item (``process_dataset``): one per option for ``pc*`` parts, else 3; 1 if not robust.

    Their ``--robust-eval`` flag is ``type=bool``, so any value given on the command line is true:
    in practice the robust protocol always runs."""
    if not robust:
        return 1
    return len(item["options"]) if part.startswith("pc") else REASONING_RUNS


def rotate(options: Sequence[str], rotate_id: int) -> tuple[str, ...]:
    """``RotationBasedDataset``: ``options[-r:] + options[:-r]``, the last ``r`` options first.
    Python slicing makes ``r = 0`` (and any ``r >= len``) the identity."""
    options = list(options)
    return tuple(options[-rotate_id:] + options[:-rotate_id])


def letter(options: Sequence[str], answer: str) -> str:
    """``"<X>"`` for the first option equal to ``answer``; a ValueError when none is (they assert)."""
    if answer not in options:
        raise ValueError(f"answer {answer!r} is not one of the options {list(options)}")
    return f"<{string.ascii_uppercase[list(options).index(answer)]}>"


def clip_order(item_id: str, rotate_id: int) -> tuple[int, int, int]:
    """``_perm_by_roundrobin``: the original clips (1-based) shown as clips 1, 2, 3 in run ``r``.

    The id ends ``_<SUBTASK>_<n>``; the permutation index is ``(n + (r % 6 + subtask index) % 6) % 6``."""
    parts = item_id.split("_")
    try:
        subtask, number = TEMPORAL_SUBTASKS.index(parts[-2]), int(parts[-1])
    except (IndexError, ValueError):
        subtasks = "|".join(TEMPORAL_SUBTASKS)
        raise ValueError(f"temporal item id {item_id!r} must end in _<{subtasks}>_<number>") from None
    return CLIP_ORDERS[(number + (rotate_id % 6 + subtask) % 6) % 6]


def temporal_answer(order: Sequence[int]) -> str:
    """The gold option text for a clip order: the shown labels of original clips 1, 2, 3 in turn,
    e.g. order (2, 3, 1) (original clip 2 shown first...) -> ``"clip 3 -> clip 1 -> clip 2"``."""
    shown_as = {original: position for position, original in enumerate(order, start=1)}
    return " -> ".join(f"clip {shown_as[original]}" for original in (1, 2, 3))


def build_runs(item: Mapping, part: str, dataset_root: str, robust: bool = True) -> list[Run]:
    """Every run of ``item`` in ``part`` (``build_prompt`` for ``rotate_id`` 0, 1, ...)."""
    if part not in PARTS:
        raise ValueError(f"unknown STAR-Bench part {part!r}; the parts are {sorted(PARTS)}")
    return [_run(item, part, dataset_root, r) for r in range(run_count(part, item, robust))]


def _run(item: Mapping, part: str, root: str, rotate_id: int) -> Run:
    question = item["question"]
    if part.startswith("tr"):
        order = clip_order(item["id"], rotate_id)
        options, answer = tuple(item["options"]), temporal_answer(order)
        clips = [item["audio_paths"][k - 1] for k in order]
        segments = [("text", _question_text(question, options)), *_temporal_context(item, part, root)]
        for position, clip in enumerate(clips, start=1):
            segments += [("text", f"\nclip {position}:"), ("audio", os.path.join(root, clip))]
        return Run(item["id"], rotate_id, options, answer, letter(options, answer), tuple(segments),
                   "-".join(map(str, order)))
    options, answer = rotate(item["options"], rotate_id), item["answer"]
    audio = (_channel_segments if part == "sr_ch" else _audio_segments)(item["audio_paths"], root)
    segments = (*audio, ("text", _question_text(question, options)))
    return Run(item["id"], rotate_id, options, answer, letter(options, answer), segments)


def _question_text(question: str, options: Sequence[str]) -> str:
    """``f"{question}\\n"`` then one ``"<A>: option\\n"`` line per option."""
    return f"{question}\n" + "".join(f"<{string.ascii_uppercase[i]}>: {o}\n" for i, o in enumerate(options))


def _audio_segments(paths: Sequence[str], root: str) -> list[Segment]:
    """``_build_audio_prompts``: a lone clip has no label; several are each preceded by "Audio i:"."""
    if len(paths) == 1:
        return [("audio", os.path.join(root, paths[0]))]
    segments: list[Segment] = []
    for i, path in enumerate(paths, start=1):
        segments += [("text", f"Audio {i}:"), ("audio", os.path.join(root, path))]
    return segments


def _channel_segments(paths: Sequence[str], root: str) -> list[Segment]:
    """``sr_ch``: the binaural clip's left and right channels as two mono files in a flat folder
    (their splitter keeps sub-folders, their prompt does not look in them)."""
    if len(paths) != 1:
        raise ValueError("sr_ch expects a single binaural audio file per item")
    stem = os.path.splitext(os.path.basename(paths[0]))[0]
    split_dir = os.path.join(root, SPLIT_CHANNEL_DIR)
    return [
        ("text", "Audio 1:"), ("audio", os.path.join(split_dir, f"{stem}_left.wav")),
        ("text", "Audio 2:"), ("audio", os.path.join(split_dir, f"{stem}_right.wav")),
        ("text", CHANNELS_NOTE),
    ]


def _temporal_context(item: Mapping, part: str, root: str) -> list[Segment]:
    """``_build_auxiliary_prompts``: tr_cap adds the scene caption, tr_uncut the uncut recording."""
    if part == "tr_cap":
        return [("text", CAPTION_PROMPT.format(caption=item["global_caption"]))]
    if part == "tr_uncut":
        return [("text", UNCUT_BEFORE), ("audio", os.path.join(root, item["uncut_audio_path"])), ("text", UNCUT_AFTER)]
    return []


# -- parser -----------------------------------------------------------------------------------------

_OPEN, _CLOSE = r"[\(\<\[\{]", r"[\)\]\>\}]"
_KEYWORDS = r"(?:answer|<answer>|solution|choice|option|correct option is|answer is|答案是|选项是)"


def parse_answer(response: str, options: Sequence[str]) -> str:
    """``MCQBaseDataset.parse_multi_choice_response``: ``"<X>"`` or ``"Z"``, with all its quirks.

    1. After a keyword (``answer``, ``option``, ``choice``..., case-insensitive, also as the end of a
       longer word: ``Multiplechoice: B``), then optional spaces and colons, a letter in brackets
       or standing alone. Bracketed hits outrank bare ones; among equals the LAST wins. The
       keyword pattern is case-insensitive, so ``answer: b`` yields ``"<b>"``, which never equals a
       gold ``"<B>"``.
    2. Else, upper-case letters only: bracketed letters (rank 2) > option texts (rank 1, matched
       case-insensitively, not inside longer words, only when the reply has more than two
       whitespace-separated words) > bare letters (rank 0); the last hit of the best rank wins.
    3. Else ``"Z"``. Only the first ``len(options)`` letters count.
    """
    letters = string.ascii_uppercase[: len(options)]
    choice = f"[{letters}]"
    hits: list[tuple[int, int, str]] = []  # (rank, position, letter)
    keyword = re.compile(rf"(?i){_KEYWORDS}\s*[:：]*\s*(?:{_OPEN}\s*({choice})\s*{_CLOSE}|\b({choice})\b)")
    for m in keyword.finditer(response):
        if m[2]:
            hits.append((0, m.start(), m[2]))
        if m[1]:
            hits.append((1, m.start(), m[1]))
    if hits:
        return f"<{max(hits)[2]}>"
    for m in re.finditer(rf"{_OPEN}\s*({choice})\s*{_CLOSE}|\b({choice})\b", response):
        if m[1]:
            hits.append((2, m.start(), m[1]))
        if m[2]:
            hits.append((0, m.start(), m[2]))
    if len(response.split()) > 2:
        for option_letter, text in zip(letters, options):
            for m in re.finditer(rf"(?<![A-Za-z]){re.escape(text)}(?![A-Za-z])", response, re.IGNORECASE):
                hits.append((1, m.start(), option_letter))
    return f"<{max(hits)[2]}>" if hits else NO_ANSWER


# -- scores -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """One scored run: ``correct`` is ``parse_answer(reply, run.options) == run.answer_letter``."""

    item_id: str
    category: str | None
    sub_category: str | None
    correct: bool


def part_report(part: str, results: Sequence[RunResult], items: Sequence[Mapping], robust: bool = True) -> dict:
    """``evaluate`` of one part: ``{"Total", "By Category", "By Sub-category"}``, each group holding
    AA and ACR in percent as the official report prints them (2 decimals), ``total_runs`` and
    ``unique_samples``. Groups are sorted by name; rows without a category (sub-category) are left
    out of those tables, as pandas' groupby leaves them out.

    Reasoning parts (``MCQBaseDataset.evaluate``) pool all runs of a group. Perception parts
    (``PerceptionDataset.evaluate``) first score each sub-category, round its AA/ACR to 2 decimals,
    then average those rounded numbers with equal weight: per category (a sub-category belongs to
    the category of its first run) and in total; these groups also give ``n_subcategories``.

    Raises ValueError unless every item has exactly its runs (``run_count``); perception parts
    always expect one run per option, even when not ``robust`` (their check ignores the flag).
    """
    expected = {
        item["id"]: len(item["options"]) if part.startswith("pc") else run_count(part, item, robust) for item in items
    }
    _check_runs(results, expected)
    return part_scores(part, results)


def part_scores(part: str, results: Sequence[RunResult]) -> dict:
    """``part_report`` without its check that every item has all its runs: the same arithmetic on
    whatever runs are given (a sweep's summary scores the runs it has, complete or not)."""
    if not part.startswith("pc"):
        report = {"Total": _summary(results)}
        for name, key in (("By Category", "category"), ("By Sub-category", "sub_category")):
            groups = _groups(results, key)
            if groups:
                report[name] = {str(k): _summary(g) for k, g in groups.items()}
        return report

    by_sub = {sub: _summary(group) for sub, group in _groups(results, "sub_category").items()}
    category_of = {sub: group[0].category for sub, group in _groups(results, "sub_category").items()}
    by_category = {}
    for category in sorted({c for c in category_of.values() if c is not None}):
        subs = [s for s, c in category_of.items() if c == category]
        runs = [r for r in results if r.category == category]
        by_category[str(category)] = {
            **_macro([by_sub[s] for s in subs]), "n_subcategories": len(subs),
            "total_runs": len(runs), "unique_samples": len({r.item_id for r in runs}),
        }
    total = {
        **_macro(list(by_sub.values())), "n_subcategories": len(by_sub),
        "total_runs": len(results), "unique_samples": len({r.item_id for r in results}),
    }
    return {"By Sub-category": {str(s): v for s, v in by_sub.items()}, "By Category": by_category, "Total": total}


def final_ma(totals: Mapping[str, Mapping]) -> dict:
    """``run.py: summarize_and_save``'s "Final MA" row: the plain mean of the parts' Total AA and
    ACR (the 2-decimal numbers of their reports, not re-rounded) and the sum of their samples."""
    if not totals:
        raise ValueError("no part totals to average")
    return {
        "AA": float(np.mean([t["AA"] for t in totals.values()])),
        "ACR": float(np.mean([t["ACR"] for t in totals.values()])),
        "Samples": sum(t["unique_samples"] for t in totals.values()),
    }


def _summary(results: Sequence[RunResult]) -> dict:
    """``_calculate_metrics``: AA = mean correctness x 100, ACR = share of items all-correct x 100."""
    per_item: dict[str, bool] = {}
    for r in results:
        per_item[r.item_id] = per_item.get(r.item_id, True) and r.correct
    return {
        "AA": _pct(np.mean([r.correct for r in results]) * 100),
        "ACR": _pct(np.mean(list(per_item.values())) * 100),
        "total_runs": len(results),
        "unique_samples": len(per_item),
    }


def _macro(summaries: Sequence[Mapping]) -> dict:
    return {key: _pct(np.mean([s[key] for s in summaries])) for key in ("AA", "ACR")}


def _groups(results: Sequence[RunResult], key: str) -> dict:
    groups: dict = {}
    for r in results:
        value = getattr(r, key)
        if value is not None:
            groups.setdefault(value, []).append(r)
    return dict(sorted(groups.items()))


def _pct(value: float) -> float:
    """A percentage as the official report writes it, ``f"{value:.2f}%"``, read back as a number."""
    return float(f"{value:.2f}")


def _check_runs(results: Sequence[RunResult], expected: Mapping[str, int]) -> None:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.item_id] = counts.get(r.item_id, 0) + 1
    wrong = sorted(i for i in set(counts) | set(expected) if counts.get(i, 0) != expected.get(i, 0))
    if wrong:
        shown = ", ".join(f"{i}: {counts.get(i, 0)} of {expected.get(i, 0)}" for i in wrong[:5])
        raise ValueError(f"runs per item do not match the protocol ({shown}); score complete run sets only")
