"""AVI-Bench's box tasks, reproduced from FudanCVL/AVI-Bench ``eval/level_metrics/score_bbox.py``
(AVL) and ``level_score.py: eval_avlg`` (AVLG), with ``utils.py: compute_iou, rmse_to_score``.

Gold boxes are ``[x, y, w, h]`` in pixels of the frame whose size is ``original_wh``; predictions
are asked for as ``[x_min, y_min, x_max, y_max]`` normalised to 0-1. Replies are read with
``ast.literal_eval`` (only ``<|endoftext|>`` removed first, and for AVLG Markdown code fences), so
Python literals (single quotes, ``None``) parse and JSON ``null`` does not. Scores are 0-1, rounded
to 5 decimals as the evaluator rounds them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .rules import answered, clean
from ....scoring.classification import set_f1

AVL_IOU_WEIGHT, AVL_INSTANCE_WEIGHT = 0.7, 0.3  # final = 0.7 mIoU + 0.3 instance score
AVL_IOU_EPSILON = 0.00001  # a video's summed IoU is divided by (gold instances + this)


def compute_iou(box_a: Sequence[float], box_b: Sequence[float]) -> float:
    """``compute_iou`` of two ``[x_min, y_min, x_max, y_max]`` boxes; 0 when the union is 0. Areas
    are not clamped, so a reversed box gives a negative area, as officially."""
    inter = max(0, min(box_a[2], box_b[2]) - max(box_a[0], box_b[0])) * max(0, min(box_a[3], box_b[3]) - max(box_a[1], box_b[1]))
    union = (box_a[2] - box_a[0]) * (box_a[3] - box_a[1]) + (box_b[2] - box_b[0]) * (box_b[3] - box_b[1]) - inter
    return 0.0 if union == 0 else inter / float(union)


def semantic_type(label: str) -> str:
    """``get_semantic_type``: ``"person_1"`` -> ``"person"`` (a trailing ``_<digits>`` dropped), lower-cased."""
    head, underscore, tail = label.rpartition("_")
    return head.lower() if underscore and re.match(r"^\d+$", tail) else label.lower()


def parse_box(raw: Any) -> list[float] | None:
    """``get_bbox``: a string is read with ``literal_eval`` first; the value must give exactly four
    ``float()``-able items, else ``None``."""
    if isinstance(raw, str):
        try:
            raw = ast.literal_eval(raw)
        except Exception:
            return None
    try:
        box = [float(v) for v in raw]
    except Exception:
        return None
    return box if len(box) == 4 else None


def _pixels(box: list[float], width: float, height: float) -> list[float]:
    """AVL's reading of a predicted box: largest |value| in (1.5, 1001] means a 0-1000 scale
    (divided by 1000); still above 1.5 means pixels (kept); else 0-1, scaled to the frame."""
    largest = max(abs(v) for v in box)
    if 1.5 < largest <= 1001:
        box = [v / 1000.0 for v in box]
        largest = max(abs(v) for v in box)
    if largest > 1.5:
        return box
    x1, y1, x2, y2 = box
    return [x1 * width, y1 * height, x2 * width, y2 * height]


def score_avl(entries: Sequence[Mapping], replies: Sequence[str | None]) -> tuple[float, float, float]:
    """``eval_avl``: ``(average, mIoU, instance)``, each 0-1 (``eval.py`` reports them as
    ``Average``, ``mIoU``, ``Instance``).

    Gold ``question_answer``: ``{"bbox": {"<category>_<n>": [x, y, w, h], ...}, "original_wh": [w, h]}``.
    A reply must parse to a dict (``{"<category>_<n>": box}``); if it does not, or the gold lacks
    ``bbox`` / ``original_wh``, the entry scores IoU 0, semantic 0 and instance error 0. Otherwise
    each gold instance in turn takes the unused predicted instance of the same category with the
    highest IoU (strictly higher wins, so the first of tied ones); only an IoU above 0 matches.
    Entry IoU = summed matched IoU / (gold instances + 1e-5); instance error = unmatched gold
    instances; semantic = F1 of the category sets. mIoU = mean entry IoU; instance = ``1 -
    tanh(RMSE of the errors)`` (always >= 0 here), 0 when the mean semantic F1 is 0; average = 0.7 mIoU + 0.3 instance.
    """
    ious, semantics, misses = [], [], []
    for entry, reply in answered(entries, replies):
        gold = entry["output"]["question_answer"]
        try:
            predicted = ast.literal_eval(clean(reply, False))
            if not (isinstance(predicted, dict) and isinstance(gold, dict)):
                raise ValueError("not a dict")
            boxes = gold["bbox"]
            width, height = gold["original_wh"]
        except Exception:
            ious.append(0)
            semantics.append(0)
            misses.append(0)
            continue
        matched, iou = _match_instances(boxes, predicted, width, height)
        ious.append(iou / (len(boxes) + AVL_IOU_EPSILON))
        misses.append(len(boxes) - matched)
        gold_types, predicted_types = {semantic_type(k) for k in boxes}, {semantic_type(k) for k in predicted}
        if not gold_types | predicted_types:
            raise ValueError(f"AVL entry {entry.get('id')}: no gold and no predicted instance, so no F1 "
                             "(the official evaluator stops here too)")
        semantics.append(set_f1(predicted_types, gold_types))
    if not ious:
        raise ValueError("no entry has a reply")
    miou, semantic = float(np.mean(ious)), float(np.mean(semantics))
    # ``rmse_to_score(rmse, k=1)`` stays a numpy float, so it rounds (and the average with it) the
    # way numpy rounds, as officially; a zero semantic score makes it a Python 0.0.
    instance = 1 - np.tanh(np.sqrt(np.mean(np.square(misses)))) if semantic != 0 else 0.0
    average = AVL_IOU_WEIGHT * miou + AVL_INSTANCE_WEIGHT * instance
    return float(round(average, 5)), round(miou, 5), float(round(instance, 5))


def _match_instances(boxes: Mapping, predicted: Mapping, width: float, height: float) -> tuple[int, float]:
    """Greedy matching of gold instances (in gold order) to predicted ones: (matches, summed IoU)."""
    used: set = set()
    total = 0.0
    for gold_key, b in boxes.items():
        gold_box, best, best_key = [b[0], b[1], b[0] + b[2], b[1] + b[3]], 0, None
        for key, raw in predicted.items():
            if semantic_type(key) != semantic_type(gold_key) or key in used:
                continue
            box = parse_box(raw)
            if box is None:
                continue
            iou = compute_iou(_pixels(box, width, height), gold_box)
            if iou > best:
                best, best_key = iou, key
        if best > 0 and best_key:
            used.add(best_key)
            total += best
    return len(used), total


def score_avlg(entries: Sequence[Mapping], replies: Sequence[str | None]) -> float:
    """``eval_avlg``: mean over entries of the mean per-frame IoU, 0-1.

    Gold ``question_answer``: ``{"bbox": {"frame_0": [x, y, w, h] or None, ...}, "original_wh": [w, h]}``.
    The reply, Markdown fences removed, must parse to a dict (else ``{}``). Per gold frame: gold
    ``None`` scores 1 if the reply has no box for it (absent or ``None``), else 0; a gold box
    scores 0 without a predicted one, else the IoU of the predicted box scaled by the frame size
    (no 0-1000 or pixel detection here); any box that cannot be read that way scores 0.
    """
    scores = []
    for entry, reply in answered(entries, replies):
        gold = entry["output"]["question_answer"]
        try:
            width, height = gold["original_wh"]
            frames = gold["bbox"]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"AVLG entry {entry.get('id')}: question_answer needs 'bbox' and 'original_wh'") from None
        if not frames:
            raise ValueError(f"AVLG entry {entry.get('id')}: no gold frame")
        text = clean(reply, False).replace("```json", "").replace("```", "").strip()
        try:
            predicted = ast.literal_eval(text)
        except Exception:
            predicted = {}
        if not isinstance(predicted, dict):
            predicted = {}
        scores.append(sum(_frame_iou(box, predicted.get(frame), width, height) for frame, box in frames.items()) / len(frames))
    if not scores:
        raise ValueError("no entry has a reply")
    return round(float(np.mean(scores)), 5)


def _frame_iou(gold: Any, box: Any, width: float, height: float) -> float:
    if gold is None:
        return 1 if box is None else 0
    if box is None:
        return 0
    try:
        scaled = [box[0] * width, box[1] * height, box[2] * width, box[3] * height]
        return compute_iou([gold[0], gold[1], gold[0] + gold[2], gold[1] + gold[3]], scaled)
    except Exception:
        return 0
