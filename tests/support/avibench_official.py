"""Independent transcriptions of FudanCVL/AVI-Bench's evaluator (``eval/level_metrics/utils.py``,
``data_utils.py``, ``level_score.py``, ``score_bbox.py`` and ``eval/eval.py``), for parity tests.

Changes from the originals, none of which touches the arithmetic: they take lists instead of file
paths (a prediction is the reply string, or ``None`` for a missing one), scikit-learn's binary
``f1_score`` / ``recall_score`` are written out (2TP / (2TP + FP + FN) and TP / (TP + FN), raising on
empty input as scikit-learn does; checked equal to scikit-learn on random vectors), and prints are
dropped. The option constants are kvprune's copy of ``definitions.py`` (``benchmarks/avibench/constants.json``).
"""

from __future__ import annotations

import ast
import json
import re

import numpy as np

from kvprune.harness.tasks.benchmarks.avibench.rules import constants


def sk_f1(y_true, y_pred):
    if not y_true:
        raise ValueError("Found empty input array")
    tp = sum(1 for t, p in zip(y_true, y_pred) if t and p)
    fp = sum(1 for t, p in zip(y_true, y_pred) if not t and p)
    fn = sum(1 for t, p in zip(y_true, y_pred) if t and not p)
    return 0.0 if 2 * tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def sk_recall(y_true, y_pred):
    if not y_true:
        raise ValueError("Found empty input array")
    tp = sum(1 for t, p in zip(y_true, y_pred) if t and p)
    fn = sum(1 for t, p in zip(y_true, y_pred) if t and not p)
    return 0.0 if tp + fn == 0 else tp / (tp + fn)


# -- utils.py / data_utils.py -------------------------------------------------------------------------

def string_cleaning(_str, clean_symbol):
    for pat in ['<|endoftext|>']:
        _str = _str.replace(pat, '')
    if clean_symbol:
        _str = re.sub(r'[^\w\s]', '', _str.lower())
    return _str


def get_real_options_or_classes(d, with_pmp=True):
    havib_constants = constants()
    if 'options' in d['input']['question'].keys():
        options = d['input']['question']['options']
        if options in havib_constants[d['task']].keys():
            options = havib_constants[d['task']][options]
        if options is not None:
            opt_or_cls = 'semantic categories' if 'cls' in options else 'options'
            if with_pmp:
                options = f'Available {opt_or_cls} are: {options}'
        else:
            options = ''
    else:
        options = ''
    return options


def parse_data_and_pred(data, preds, clean_symbol):
    n = min(len(data), len(preds))
    gt_labels, options, pred_dicts = {}, {}, {}
    for i in range(n):
        _d, _p = data[i], preds[i]
        if _p is None:
            continue
        key = f'task={_d["task"]}#id={_d["id"]}#pos={i}'
        gt_labels[key] = _d['output']['question_answer']
        options[key] = get_real_options_or_classes(_d, with_pmp=False)
        pred_dicts[key] = string_cleaning(_p, clean_symbol)
    return gt_labels, pred_dicts, options


def extract_first_number(text):
    match = re.search(r'\d+', text)
    return match.group(0) if match else None


def rmse_to_score(rmse, k=0.3, b=0):
    try:
        assert rmse >= 0, rmse
    except Exception:
        return 0
    return 1 - np.tanh(k * rmse + b)


def compute_iou(boxA, boxB):
    xA = max(boxA[0], boxB[0])
    yA = max(boxA[1], boxB[1])
    xB = min(boxA[2], boxB[2])
    yB = min(boxA[3], boxB[3])
    inter_area = max(0, xB - xA) * max(0, yB - yA)
    areaA = (boxA[2] - boxA[0]) * (boxA[3] - boxA[1])
    areaB = (boxB[2] - boxB[0]) * (boxB[3] - boxB[1])
    union_area = areaA + areaB - inter_area
    if union_area == 0:
        return 0.0
    return inter_area / float(union_area)


def find_ordered_matches(keywords, long_str):
    cleaned_str = re.sub(r'[^\w\s]', '', long_str.lower())
    result = []
    for word in keywords:
        cleaned_word = re.sub(r'[^\w\s]', '', word.lower())
        match = re.compile(r'\b' + re.escape(cleaned_word) + r'\b').search(cleaned_str)
        if match:
            result.append((match.start(), word))
    result.sort()
    return [word for _, word in result]


# -- level_score.py -----------------------------------------------------------------------------------

def _double_confirm(score_dict, data_id, full_match_score, double_confirm):
    if 'id=pre_' in data_id:
        if full_match_score == 0 and double_confirm:
            pre_id = data_id.split('#id=')[1].split('#')[0]
            marker = f'#id={pre_id[len("pre_"):]}#'
            for k in list(score_dict.keys()):
                if marker in k:
                    score_dict[k] = 0
                    break
    else:
        score_dict[data_id] = full_match_score


def eval_avsqa(data, preds, double_confirm=True):
    labels, preds, options = parse_data_and_pred(data, preds, clean_symbol=False)
    score_dict = {}
    for data_id, data_label in labels.items():
        data_pred = f'{preds[data_id]}'
        data_label = [s.strip() for s in f'{data_label}'.lower().strip().split(';')]
        data_pred = [s.strip() for s in data_pred.replace('*', '').replace('#', '').lower().strip().split(';')]
        full_match_score = 1 if sorted(data_pred) == sorted(data_label) else 0
        _double_confirm(score_dict, data_id, full_match_score, double_confirm)
    return round(sum(score_dict.values()) / len(score_dict), 5)


def get_full_match_acc(pred, label):
    if pred == label:
        return 1
    if label.isdigit():
        if f'{extract_first_number(pred)}' == label:
            return 1
    return 0


def eval_full_match_acc(data, preds, double_confirm=True):
    labels, preds, options = parse_data_and_pred(data, preds, clean_symbol=True)
    invalid_pre_ids = set()
    for d in data:
        eid = str(d.get('id', ''))
        if not eid.startswith('pre_'):
            continue
        if d.get('input', {}).get('question', {}).get('text') is None or d.get('output', {}).get('question_answer') is None:
            invalid_pre_ids.add(eid)
    score_dict = {}
    for data_id, data_label in labels.items():
        pre_id = data_id.split('#id=')[1].split('#')[0] if '#id=' in data_id else ''
        if pre_id in invalid_pre_ids:
            continue
        data_pred, data_label, data_options = f'{preds[data_id]}', f'{data_label}', options[data_id]
        if data_options is not None:
            res = find_ordered_matches(data_options, data_pred)
            if res is not None and len(res) > 0:
                data_pred = res[0]
        _double_confirm(score_dict, data_id, get_full_match_acc(data_pred, data_label), double_confirm)
    return round(sum(score_dict.values()) / len(score_dict), 5)


def eval_multi_instance_cls_and_count(data, preds, task_name):
    labels, preds, options = parse_data_and_pred(data, preds, clean_symbol=False)
    semantic_scores, absolute_errors = [], []
    for data_id in labels:
        s = preds[data_id].lstrip()
        if s.lower().startswith('answer='):
            s = s.split('=', 1)[1].lstrip()
        preds[data_id] = s.replace("'", '"')
        mk = 0.3
        tau = 7 if task_name.lower() == 'amic' else 12
        if len(preds[data_id]) >= 300:
            continue
        try:
            preds[data_id] = json.loads(preds[data_id])
            pred_cls = preds[data_id].keys()
            true_cls = labels[data_id].keys()
            if task_name.lower() == 'amic':
                all_labels = set(preds[data_id].keys()).union(set(labels[data_id].keys()))
            else:
                all_labels = set(labels[data_id].keys())
            y_true = [1 if label in true_cls else 0 for label in all_labels]
            y_pred = [1 if label in pred_cls else 0 for label in all_labels]
            semantic_scores.append(sk_f1(y_true, y_pred) if task_name.lower() == 'amic' else sk_recall(y_true, y_pred))
        except Exception:
            semantic_scores.append(0)
    for k_label in labels:
        label, pred = labels[k_label], preds[k_label]
        if len(f'{pred}') >= 300:
            continue
        _label_abs_list = []
        try:
            pred = json.loads(f'{pred}'.replace("'", '"'))
            for k in label:
                if k in pred:
                    abs_err = abs(int(pred[k]) - int(label[k]))
                    if task_name.lower() == 'vmic' and int(pred[k]) >= 10 and int(label[k]) >= 10:
                        abs_err = 0
                else:
                    abs_err = tau
                _label_abs_list.append(abs_err)
        except Exception:
            for k in label:
                _label_abs_list.append(int(label[k]))
        absolute_errors.append(min(np.mean(_label_abs_list).__float__(), 20))
    semantic_score = np.mean(semantic_scores)
    rmse = np.sqrt(np.mean(np.square(absolute_errors)))
    counting_score = rmse_to_score(rmse, k=mk, b=0)
    if semantic_score == 0:
        counting_score = 0
    mic_score = (semantic_score + counting_score) / 2
    return round(float(mic_score), 5), round(float(semantic_score), 5), round(float(counting_score), 5)


def set_f1(pred_set, true_set):
    pred_set, true_set = set(pred_set), set(true_set)
    if not pred_set and not true_set:
        return 1.0
    if not pred_set or not true_set:
        return 0.0
    precision = len(pred_set & true_set) / len(pred_set)
    recall = len(pred_set & true_set) / len(true_set)
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def eval_retrieval(data, preds):
    labels, preds, options = parse_data_and_pred(data, preds, clean_symbol=True)
    f1_scores, recall_1_list, recall_3_list, confidence_list, pred_list = [], [], [], [], []
    for data_id in labels:
        _true = labels[data_id]
        _pred = preds[data_id]
        _pred = _pred.replace('\n', ' ').split(' ') if _pred is not None else []
        _pred = sorted([int(p) for p in _pred if p.isdigit()])
        _pred = list(set(_pred))
        f1_scores.append(set_f1(_pred, _true))
        if _pred not in pred_list:
            pred_list.append(_pred)
        confidence_list.append(0.3 if len(_pred) > 6 else 1)
        recall_1_list.append(1.0 if any(p in _true for p in _pred[:1]) else 0.0)
        recall_3_list.append(1.0 if any(p in _true for p in _pred[:3]) else 0.0)
    repeat_rate_pred = (len(labels) - len(pred_list)) / len(labels)
    tau = 0.8
    repeat_rate_pred = max(tau, repeat_rate_pred)
    repeat_pred_penalty = 1 - (repeat_rate_pred - tau)
    confidence_overall = np.mean(confidence_list)
    r1 = round(np.mean(recall_1_list) * confidence_overall * repeat_pred_penalty, 5)
    r3 = round(np.mean(recall_3_list) * confidence_overall * repeat_pred_penalty, 5)
    f1 = round(np.mean(f1_scores) * confidence_overall * repeat_pred_penalty, 5)
    avg = ((r1 + r3) / 2 + f1) / 2
    return {"Recall@1": r1, "Recall@3": r3, "F1_score": f1, "Average": avg}


def eval_avlg(data, preds):
    labels, preds, options = parse_data_and_pred(data, preds, clean_symbol=False)
    iou_list = []
    for data_id in labels:
        _true = labels[data_id]
        _pred = preds[data_id]
        _pred = _pred.replace('```json', '').replace('```', '').strip() if _pred is not None else "{'frame_0': []}"
        try:
            pred_dict = ast.literal_eval(_pred)
        except Exception:
            pred_dict = {}
        if not isinstance(pred_dict, dict):
            pred_dict = {}
        w, h = _true["original_wh"]
        true_bbox_dict = _true["bbox"]
        iou_score = 0
        for frame_key, true_box in true_bbox_dict.items():
            pred_box_norm = pred_dict.get(frame_key, None)
            if true_box is None:
                iou = 1 if pred_box_norm is None else 0
            elif pred_box_norm is None:
                iou = 0
            else:
                try:
                    pred_box = [pred_box_norm[0] * w, pred_box_norm[1] * h, pred_box_norm[2] * w, pred_box_norm[3] * h]
                    true_box = [true_box[0], true_box[1], true_box[0] + true_box[2], true_box[1] + true_box[3]]
                    iou = compute_iou(true_box, pred_box)
                except Exception:
                    iou = 0
            iou_score += iou
        iou_list.append(iou_score / len(true_bbox_dict))
    return round(np.mean(iou_list).__float__(), 5)


# -- score_bbox.py ------------------------------------------------------------------------------------

def get_semantic_type(label):
    if '_' in label:
        parts = label.rsplit('_', 1)
        if len(parts) == 2 and re.match(r'^\d+$', parts[1]):
            return parts[0].lower()
    return label.lower()


def get_bbox(bbox_str):
    if isinstance(bbox_str, str):
        try:
            bbox_str = ast.literal_eval(bbox_str)
        except Exception:
            return None
    try:
        _bbox = [float(b) for b in bbox_str]
        if len(_bbox) != 4:
            return None
    except Exception:
        return None
    return _bbox


def eval_avl(data, preds):
    labels, preds, _ = parse_data_and_pred(data, preds, clean_symbol=False)
    ious, sems, errs = [], [], []
    for data_id in labels:
        _true_output = labels[data_id]
        try:
            _pred = ast.literal_eval(preds[data_id])
            assert isinstance(_pred, dict) and isinstance(_true_output, dict)
        except Exception:
            ious.append(0), sems.append(0), errs.append(0)
            continue
        try:
            true_bboxes = _true_output["bbox"]
            orig_w, orig_h = _true_output["original_wh"]
        except Exception:
            ious.append(0), sems.append(0), errs.append(0)
            continue
        instance_map, used_pred_keys, video_iou = {}, set(), 0
        for true_key, true_bbox in true_bboxes.items():
            max_iou, best_pred_key, true_sem = 0, None, get_semantic_type(true_key)
            true_bbox = [true_bbox[0], true_bbox[1], true_bbox[0] + true_bbox[2], true_bbox[1] + true_bbox[3]]
            for pred_key, pred_bbox_raw in _pred.items():
                if get_semantic_type(pred_key) != true_sem or pred_key in used_pred_keys:
                    continue
                pred_bbox = get_bbox(pred_bbox_raw)
                if pred_bbox is None:
                    continue
                m = max(abs(v) for v in pred_bbox)
                if m > 1.5 and m <= 1001:
                    pred_bbox = [v / 1000.0 for v in pred_bbox]
                    m = max(abs(v) for v in pred_bbox)
                x1, y1, x2, y2 = pred_bbox
                scaled = [x1, y1, x2, y2] if m > 1.5 else [x1 * orig_w, y1 * orig_h, x2 * orig_w, y2 * orig_h]
                iou = compute_iou(scaled, true_bbox)
                if iou > max_iou:
                    max_iou, best_pred_key = iou, pred_key
            if max_iou > 0 and best_pred_key:
                instance_map[true_key] = best_pred_key
                used_pred_keys.add(best_pred_key)
                video_iou += max_iou
        video_iou /= (len(true_bboxes) + 0.00001)
        ious.append(video_iou)
        errs.append(len(true_bboxes) - len(instance_map))
        true_semantics = set(get_semantic_type(k) for k in true_bboxes.keys())
        pred_semantics = set(get_semantic_type(k) for k in _pred.keys())
        all_labels = list(true_semantics.union(pred_semantics))
        sems.append(sk_f1([1 if lbl in true_semantics else 0 for lbl in all_labels],
                          [1 if lbl in pred_semantics else 0 for lbl in all_labels]))
    final_miou = float(np.mean(ious))
    final_semantic_score = float(np.mean(sems))
    final_instance_score = rmse_to_score(np.sqrt(np.mean(np.square(errs))), k=1, b=0)
    if final_semantic_score == 0:
        final_instance_score = 0.0
    final_score = 0.7 * final_miou + 0.3 * final_instance_score
    return {'miou': round(final_miou, 5), 'instance_score': round(final_instance_score, 5),
            'final_score': round(final_score, 5)}


# -- eval.py: the pooled VSQA -----------------------------------------------------------------------

def pooled_vsqa(di, pi, dv, pv):
    def _tag(eid, tag):
        s = str(eid)
        return f'pre_{tag}-{s[4:]}' if s.startswith('pre_') else f'{tag}-{s}'
    di = [{**d, 'id': _tag(d['id'], 'I')} for d in di]
    dv = [{**d, 'id': _tag(d['id'], 'V')} for d in dv]
    return eval_full_match_acc(di + dv, list(pi) + list(pv))
