"""AVI-Bench's captioning score (AVC): FENSE, as FudanCVL/AVI-Bench
``eval/level_metrics/level_score.py: eval_caption_with_references`` computes it with aac-metrics'
``fense`` (Zhou et al., ICASSP 2022): per caption, the mean Sentence-BERT cosine similarity to its
references, times 0.1 when the fluency-error detector's error probability exceeds 0.9; the corpus
score is the mean.

FENSE needs two scoring models, which the official evaluator downloads on first use and which kvprune
never downloads: ``sentence-transformers/paraphrase-TinyBERT-L6-v2`` (the Sentence-BERT) and
``bert-base-uncased`` (the encoder and tokenizer of the fluency-error detector), plus the detector's
fine-tuned weights ``echecker_clotho_audiocaps_base.ckpt`` (FENSE's release). Give local copies;
without them ``score_caption`` raises ``FenseUnavailable`` naming them. It also needs the optional
packages aac-metrics and sentence-transformers (``pip install aac-metrics``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .rules import answered, clean

SBERT_MODEL = "sentence-transformers/paraphrase-TinyBERT-L6-v2"
ECHECKER_ENCODER = "bert-base-uncased"
ECHECKER_WEIGHTS = "echecker_clotho_audiocaps_base.ckpt"


class FenseUnavailable(RuntimeError):
    """FENSE cannot be computed here: a scoring model or package is missing (the message says which)."""


@dataclass(frozen=True)
class FenseModels:
    """Local copies of what FENSE loads: the Sentence-BERT folder, the ``bert-base-uncased`` folder
    and the echecker checkpoint file."""

    sbert: Path
    bert: Path
    echecker: Path

    def check(self) -> None:
        missing = [f"{what} at {path}" for what, path, ok in (
            (SBERT_MODEL, self.sbert, (Path(self.sbert) / "config.json").is_file() or (Path(self.sbert) / "modules.json").is_file()),
            (ECHECKER_ENCODER, self.bert, (Path(self.bert) / "config.json").is_file()),
            (ECHECKER_WEIGHTS, self.echecker, Path(self.echecker).is_file()),
        ) if not ok]
        if missing:
            raise FenseUnavailable(
                "AVC's FENSE needs its two scoring models and the fluency detector's weights as local copies: "
                f"{SBERT_MODEL} (a sentence-transformers folder), {ECHECKER_ENCODER} (a transformers folder) and "
                f"{ECHECKER_WEIGHTS}; not found: " + "; ".join(missing))


def caption_pairs(entries: Sequence[Mapping], replies: Sequence[str | None]) -> tuple[list[str], list[list[str]]]:
    """The candidates and their references as the official function collects them: replies with
    only ``<|endoftext|>`` removed, empty ones skipped; references a list (falsy items dropped,
    the rest ``str()``) or one ``str()``; an entry left with no reference is skipped."""
    candidates, references = [], []
    for entry, reply in answered(entries, replies):
        reply = clean(reply, False)
        gold = entry["output"]["question_answer"]
        refs = [str(r) for r in gold if r] if isinstance(gold, list) else [str(gold)]
        if reply == "" or not refs:
            continue
        candidates.append(str(reply))
        references.append(refs)
    return candidates, references


def score_caption(entries: Sequence[Mapping], replies: Sequence[str | None], models: FenseModels | None,
                  device: str = "cpu", batch_size: int = 32) -> dict[str, float | int]:
    """``eval_caption_with_references``: ``{"fense", "sbert_sim", "fer", "n_samples", "average"}``
    (``average`` is FENSE, the headline), scores rounded to 5 decimals. No caption to score is a
    ValueError here, where the official function returns zeros."""
    models = _checked(models)
    candidates, references = caption_pairs(entries, replies)
    if not candidates:
        raise ValueError("no AVC entry has a non-empty reply and a reference")
    corpus, _ = _fense(candidates, references, _scorer(models, device), device, batch_size)
    scores = {name: round(float(corpus[name]), 5) for name in ("fense", "sbert_sim", "fer")}
    return {**scores, "n_samples": len(candidates), "average": scores["fense"]}


def caption_fense(entry: Mapping, reply: str | None, models: FenseModels | None, device: str = "cpu") -> float | None:
    """One caption's FENSE (unrounded; the corpus score is their mean), or None for a caption the
    evaluator skips (no reply, an empty one, no reference). The scoring models load once."""
    models = _checked(models)
    candidates, references = caption_pairs([entry], [reply])
    if not candidates:
        return None
    _, sentences = _fense(candidates, references, _scorer(models, device), device, 1)
    return float(sentences["fense"][0])


def _checked(models: FenseModels | None) -> FenseModels:
    if models is None:
        raise FenseUnavailable(f"AVC's FENSE needs local copies of {SBERT_MODEL} and {ECHECKER_ENCODER} "
                               f"(and the detector weights {ECHECKER_WEIGHTS}); none were given")
    models.check()
    return models


@functools.cache
def _scorer(models: FenseModels, device: str) -> tuple:
    """aac-metrics' FENSE parts on the local models, loaded once: the Sentence-BERT, and the echecker
    rebuilt on the local encoder folder and loaded from the checkpoint, as aac-metrics loads its
    downloaded copy."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import torch
        from aac_metrics.functional.fer import BERTFlatClassifier
        from sentence_transformers import SentenceTransformer
        from transformers import AutoTokenizer
    except ImportError as error:
        raise FenseUnavailable(f"AVC's FENSE needs the packages aac-metrics and sentence-transformers ({error})") from error
    states = torch.load(models.echecker, map_location="cpu")
    if states.get("model_type") != ECHECKER_ENCODER:
        raise FenseUnavailable(f"{models.echecker} expects the encoder {states.get('model_type')!r}, not {ECHECKER_ENCODER}")
    echecker = BERTFlatClassifier(model_type=str(models.bert), num_classes=states["num_classes"])
    weights = dict(states["state_dict"])
    weights.pop("encoder.embeddings.position_ids", None)  # a buffer newer transformers no longer keep
    echecker.load_state_dict(weights)
    return (SentenceTransformer(str(models.sbert), device=device), echecker.eval().to(device),
            AutoTokenizer.from_pretrained(models.bert))


def _fense(candidates: list[str], references: list[list[str]], scorer: tuple, device: str, batch_size: int):
    """aac-metrics' ``fense``: the corpus scores and the per-caption ones."""
    from aac_metrics.functional.fense import fense

    sbert, echecker, tokenizer = scorer
    return fense(candidates, references, sbert_model=sbert, echecker=echecker, echecker_tokenizer=tokenizer,
                 device=device, batch_size=batch_size)
