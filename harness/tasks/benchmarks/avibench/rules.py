"""AVI-Bench's prompts, constants and its text-answer scorers (full match with double confirm for
ASQA, VSQA, AVM, AVH, VAH, AVQA; AVSQA's set match; AMIC/VMIC multi-instance counting), reproduced
from FudanCVL/AVI-Bench (``run.py``, ``scripts/utils.py``,
``eval/level_metrics/{utils,data_utils,level_score,definitions}.py``, ``eval/eval.py``). The box
tasks (AVL, AVLG) are in ``grounding``, retrieval (AVR, VAR) in ``retrieval``,
AVC's FENSE in ``fense``, the stage aggregates in ``levels`` and the refine step's
prompts in ``refine``.

Layout: ``<levels>/<stage>/<TASK>/data.json`` (a list) and ``input/``; ASQA is ``sensation/ASQA``,
AMIC ``perception/AMIC``. An entry is ``{"id", "task", "subtask", "input": {"question": {"prompt",
"text", "options"}, "audio_list", "image_list", "video"}, "output": {"question_answer"}}``; ``prompt``
and ``options`` are keys into the benchmark's constants (``constants.json``, copied from
``definitions.py``), media paths start ``./input``. ASQA also has "pre-question" entries, ids
``pre_<id>`` ("can you hear anything?"), run like any other entry.

Official pipeline: inference writes a reply per entry, position-aligned with data.json; an LLM then
"refines" each reply (QA tasks: the bare final answer; AMIC: a ``{"class": "count"}`` dict); the
evaluator scores the refined text. The scorers take whichever text they are given: the model's own
reply (judge-free) or the refined one (``refine`` with a judge), and apply every
deterministic step of the evaluator to it. Entries and replies pair by position, as the evaluator
pairs them; a ``None`` reply is skipped. Scores are on the evaluator's 0-1 scale, rounded to 5
decimals as it rounds them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ....scoring.classification import set_f1

TASK_DIRS = {"ASQA": "sensation/ASQA", "AMIC": "perception/AMIC"}
SYSTEM_PROMPT = "You are a helpful assistant."
END_OF_TEXT = "<|endoftext|>"
MISSING_CLASS_ERROR = {"AMIC": 7, "VMIC": 12}  # ``tau``: the error charged for a gold class not predicted
MIC_ERROR_CAP = 20  # an item's mean absolute error is capped here
MIC_MAX_REPLY = 300  # replies this long (characters) are left out of both MIC scores
VMIC_NOISY_COUNT = 10  # VMIC: counts both at or above this are "noisy labels for image", error 0
COUNTING_SLOPE = 0.3  # ``rmse_to_score(rmse, k=0.3)``


@cache
def constants() -> dict[str, dict[str, Any]]:
    """The prompt and option constants of the audio-only tasks, by task then key."""
    return json.loads(Path(__file__).with_name("constants.json").read_text(encoding="utf-8"))


# -- prompt -----------------------------------------------------------------------------------------


def resolve(entry: Mapping, key: str) -> Any:
    """``get_real_prompt`` / ``get_real_options_or_classes``: the question's ``key`` field, replaced by
    the constant it names; ``None`` or a missing field gives ``""``; any other string stays as is."""
    question = entry["input"]["question"]
    if key not in question:
        return ""
    value = question[key]
    table = constants().get(entry["task"])
    if table is None:
        raise ValueError(f"task {entry['task']!r}: only {sorted(constants())} have constants here")
    if not isinstance(value, (str, type(None))):
        raise ValueError(f"entry {entry.get('id')}: {key} must name a constant, got {value!r}")
    value = table.get(value, value) if isinstance(value, str) else value
    return "" if value is None else value


def text_input(entry: Mapping) -> str:
    """``get_real_input``: ``f"{prompt}. Available options are: {options}. {question}"``, the options
    written as a Python list (``['yes', 'no', 'not sure']``); with null or absent options the middle
    part is empty (``"{prompt}. . {question}"``), and so is a null or absent prompt. Their "semantic
    categories" wording needs an option value containing "cls" that is not a constant's name."""
    options = resolve(entry, "options")
    kind = "semantic categories" if "cls" in options else "options"
    phrase = f"Available {kind} are: {options}" if entry["input"]["question"].get("options") is not None else ""
    return f"{resolve(entry, 'prompt')}. {phrase}. {entry['input']['question']['text']}"


def conversation(entry: Mapping, task_dir: str) -> list[dict]:
    """``build_conversation``: the system turn, then one user turn holding the images, the audio
    clips, the video (16 frames) and last the text; ``./input`` in media paths becomes
    ``<task_dir>/input`` (the official code then passes ``file://`` + the absolute path)."""
    media = entry["input"]
    content = [{"type": "image", "image": media_path(p, task_dir)} for p in media.get("image_list") or []]
    content += [{"type": "audio", "audio": media_path(p, task_dir)} for p in media.get("audio_list") or []]
    if media.get("video") is not None:
        content.append({"type": "video", "video": media_path(media["video"], task_dir), "nframes": 16})
    content.append({"type": "text", "text": text_input(entry)})
    system = {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]}
    return [system, {"role": "user", "content": content}]


def media_path(path: str, task_dir: str) -> str:
    """A media path of an entry (``./input/...``) in the task folder ``task_dir``."""
    return path.replace("./input", f"{task_dir}/input")


# -- ASQA: full match with double confirm ------------------------------------------------------------


def clean(reply: str, clean_symbol: bool) -> str:
    """``string_cleaning``: drop ``<|endoftext|>``; with ``clean_symbol``, lower-case and delete
    every character that is neither a word character nor whitespace."""
    reply = reply.replace(END_OF_TEXT, "")
    return re.sub(r"[^\w\s]", "", reply.lower()) if clean_symbol else reply


def ordered_matches(options: Sequence[str] | str, text: str) -> list[str]:
    """``find_ordered_matches``: the options found in ``text`` as whole words (both cleaned like
    ``clean(..., True)``), earliest first; options found at the same place sort by their text. A
    string instead of a list is searched character by character, as the official loop does."""
    cleaned = re.sub(r"[^\w\s]", "", text.lower())
    found = []
    for option in options:
        word = re.sub(r"[^\w\s]", "", option.lower())
        match = re.search(rf"\b{re.escape(word)}\b", cleaned)
        if match:
            found.append((match.start(), option))
    return [option for _, option in sorted(found)]


def full_match(prediction: str, label: str) -> int:
    """``get_full_match_acc``: 1 if equal, or if the label is all digits and the first digit run in
    the prediction equals it (``"4"`` matches ``"i hear 4 beats"`` and ``"40"`` does not)."""
    if prediction == label:
        return 1
    if label.isdigit():
        number = re.search(r"\d+", prediction)
        return int(number is not None and number[0] == label)
    return 0


def entry_full_match(entry: Mapping, reply: str) -> int:
    """One entry's score in ``eval_full_match_acc``, before double confirm: the reply cleaned
    (``clean(..., True)``); if it mentions options, the earliest one is the prediction; then
    ``full_match`` against ``str(question_answer)``."""
    prediction = clean(reply, clean_symbol=True)
    mentioned = ordered_matches(resolve(entry, "options"), prediction)
    return full_match(mentioned[0] if mentioned else prediction, str(entry["output"]["question_answer"]))


def answered(entries: Sequence[Mapping], replies: Sequence[str | None]) -> list[tuple[Mapping, str]]:
    """``parse_data_and_pred``'s pairing: entry and reply by position (the shorter list decides),
    entries whose reply is ``None`` left out."""
    return [(entry, reply) for entry, reply in zip(entries, replies) if reply is not None]


def score_full_match(entries: Sequence[Mapping], replies: Sequence[str | None], double_confirm: bool = True) -> float:
    """``eval_full_match_acc`` (ASQA, VSQA_I, VSQA_V, AVM, AVH, VAH, AVQA): accuracy over the formal
    (non-``pre_``) entries, 0-1, each reply scored by ``entry_full_match``. ``pre_`` entries whose
    question text or answer is null are ignored altogether."""
    invalid_pre = {
        str(e.get("id", "")) for e in entries
        if str(e.get("id", "")).startswith("pre_")
        and (e.get("input", {}).get("question", {}).get("text") is None
             or e.get("output", {}).get("question_answer") is None)
    }
    kept = [(e, r) for e, r in answered(entries, replies) if str(e["id"]) not in invalid_pre]
    return _confirmed_accuracy(kept, entry_full_match, double_confirm)


def _confirmed_accuracy(pairs: Sequence[tuple[Mapping, str]], score, double_confirm: bool) -> float:
    """Mean score of the formal entries. Double confirm: a wrong ``pre_<id>`` answer zeroes the
    first already-scored formal entry with id ``<id>`` (one placed after its formal entry only, as
    in the data)."""
    scores: list[list] = []  # [entry id, score] of formal entries, in order
    for entry, reply in pairs:
        entry_id = str(entry["id"])
        value = score(entry, reply)
        if not entry_id.startswith("pre_"):
            scores.append([entry_id, value])
        elif value == 0 and double_confirm:
            formal = next((s for s in scores if s[0] == entry_id[len("pre_"):]), None)
            if formal is not None:
                formal[1] = 0
    if not scores:
        raise ValueError("no formal entry has a reply")
    return round(sum(s for _, s in scores) / len(scores), 5)


def score_vsqa(image: tuple[Sequence[Mapping], Sequence[str | None]],
               video: tuple[Sequence[Mapping], Sequence[str | None]]) -> float:
    """``eval.py``'s pooled VSQA (the paper's one task): VSQA_I and VSQA_V entries, ids tagged
    ``I-<id>`` / ``V-<id>`` (``pre_I-<id>`` / ``pre_V-<id>`` for pre-questions, so double confirm
    still pairs them), scored together by ``score_full_match``. Each half is (entries, replies)
    with one reply slot per entry: the official merge concatenates the two prediction files, so a
    shorter half would shift every later pairing; that is refused here."""
    tagged_entries: list[Mapping] = []
    tagged_replies: list[str | None] = []
    for tag, (entries, replies) in (("I", image), ("V", video)):
        if len(entries) != len(replies):
            raise ValueError(f"VSQA_{tag}: {len(entries)} entries but {len(replies)} reply slots; give one per entry")
        for entry in entries:
            entry_id = str(entry["id"])
            new_id = f"pre_{tag}-{entry_id[4:]}" if entry_id.startswith("pre_") else f"{tag}-{entry_id}"
            tagged_entries.append({**entry, "id": new_id})
        tagged_replies += list(replies)
    return score_full_match(tagged_entries, tagged_replies)


# -- AVSQA: the chosen options as a set, with double confirm -------------------------------------------


def avsqa_match(prediction: str, label: Any) -> int:
    """``eval_avsqa``'s per-entry rule: the label (``f"{label}"``) lower-cased, stripped and split at
    ``;``; the prediction likewise after deleting ``*`` and ``#``; each part stripped; 1 if the two
    sorted lists are equal (so ``"#Cube; red#"`` matches ``"red;cube"``)."""
    gold = sorted(part.strip() for part in f"{label}".lower().strip().split(";"))
    predicted = sorted(part.strip() for part in prediction.replace("*", "").replace("#", "").lower().strip().split(";"))
    return int(predicted == gold)


def score_avsqa(entries: Sequence[Mapping], replies: Sequence[str | None], double_confirm: bool = True) -> float:
    """``eval_avsqa``: accuracy of ``avsqa_match`` on the replies (only ``<|endoftext|>`` removed)
    over the formal entries, with double confirm as in ``score_full_match`` but no entry ignored
    (a ``pre_`` entry with a null question still counts)."""
    return _confirmed_accuracy(
        answered(entries, replies),
        lambda entry, reply: avsqa_match(clean(reply, False), entry["output"]["question_answer"]),
        double_confirm,
    )


# -- AMIC / VMIC: semantic score and counting --------------------------------------------------------


def counting_score(rmse: float, slope: float = COUNTING_SLOPE) -> float:
    """``rmse_to_score(rmse, k=slope)``: ``1 - tanh(slope * rmse)``; 0 when rmse is not >= 0 (NaN)."""
    return float(1 - np.tanh(slope * rmse)) if rmse >= 0 else 0.0


def score_amic(entries: Sequence[Mapping], replies: Sequence[str | None]) -> tuple[float, float, float]:
    """``score_mic`` for AMIC."""
    return score_mic(entries, replies, "AMIC")


def score_mic(entries: Sequence[Mapping], replies: Sequence[str | None], task: str) -> tuple[float, float, float]:
    """``eval_multi_instance_cls_and_count`` for AMIC or VMIC: ``(average, semantic, counting)``, 0-1.

    Per reply (only ``<|endoftext|>`` removed): strip a leading ``answer=``, turn ``'`` into ``"``,
    parse as JSON. Semantic: AMIC the set F1 of the dict's keys against the gold classes, VMIC the
    recall of the gold classes; a reply that does not parse to a dict (or an entry with no gold
    class) scores 0; a reply of 300+ characters is left out. Counting: per entry, the mean over gold
    classes of |predicted - gold| (``int()`` of both; ``tau`` = 7 (AMIC) or 12 (VMIC) for a class
    not predicted; VMIC: 0 when both counts are 10 or more; the gold counts themselves when the
    reply does not parse, after any errors already collected for that entry), capped at 20; the
    counting score is ``counting_score`` of the root mean square over entries, and 0 whenever the
    semantic score is 0. Average = their mean. The parsed dict is re-read through its Python
    ``str()`` for counting, as the official code re-reads it."""
    if task not in MISSING_CLASS_ERROR:
        raise ValueError(f"multi-instance scoring is for {sorted(MISSING_CLASS_ERROR)}, not {task!r}")
    pairs = [(e["output"]["question_answer"], clean(r, False)) for e, r in answered(entries, replies)]
    if not pairs:
        raise ValueError("no entry has a reply")
    semantic, errors = [], []
    for gold, reply in pairs:
        kept = _strip_answer_prefix(reply).replace("'", '"')
        if len(kept) >= MIC_MAX_REPLY:
            continue
        try:
            kept = json.loads(kept)
            semantic.append(_semantic(task, kept.keys(), gold.keys()))
        except Exception:
            semantic.append(0.0)
        errors.append(_count_error(gold, kept, task))
    semantic_score = np.mean(semantic) if semantic else np.nan
    errors = [e for e in errors if e is not None]
    rmse = np.sqrt(np.mean(np.square(errors))) if errors else np.nan
    counting = counting_score(rmse) if semantic_score != 0 else 0.0
    average = (semantic_score + counting) / 2
    return round(float(average), 5), round(float(semantic_score), 5), round(float(counting), 5)


def _semantic(task: str, predicted, gold) -> float:
    """AMIC: scikit-learn's binary F1 over the union of classes; VMIC: its recall over the gold
    classes. Both raise (scored 0 by the caller) when there is no class to score, as scikit-learn
    raises on empty input."""
    if task == "AMIC":
        return set_f1(predicted, gold)
    gold = set(gold)
    if not gold:
        raise ValueError("no gold class")
    return len(gold & set(predicted)) / len(gold)


def _strip_answer_prefix(reply: str) -> str:
    text = reply.lstrip()
    return text.split("=", 1)[1].lstrip() if text.lower().startswith("answer=") else text


def _count_error(gold: Mapping, kept: Any, task: str) -> float | None:
    """One entry's capped mean absolute count error; ``None`` for a 300+ character reply."""
    text = f"{kept}"
    if len(text) >= MIC_MAX_REPLY:
        return None
    errors: list[int] = []
    try:
        predicted = json.loads(text.replace("'", '"'))
        for name in gold:
            if name not in predicted:
                errors.append(MISSING_CLASS_ERROR[task])
                continue
            error = abs(int(predicted[name]) - int(gold[name]))
            if task == "VMIC" and int(predicted[name]) >= VMIC_NOISY_COUNT and int(gold[name]) >= VMIC_NOISY_COUNT:
                error = 0
            errors.append(error)
    except Exception:
        errors += [int(gold[name]) for name in gold]
    mean = float(np.mean(errors)) if errors else float("nan")
    return min(mean, MIC_ERROR_CAP)
