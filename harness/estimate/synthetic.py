"""The sources an estimate and a dry run run the sweep on (``sweep.source``): the sweep's own code path,
on samples whose answers have known lengths.

* ``GoldAnswers``: a checkpoint on its tasks' data (the sweep's own samples), each answer decoded to
  the length of its gold answer (``answers``);
* ``SyntheticPrompts``: prompts made up at each sample's audio length, from a task's data where it is
  there (its samples' durations and gold answers) or from what is published of the task
  (``published``: its sample count and duration range, spread evenly over the range in a shuffled
  order, each answer as long as ``answers`` plans). Each sample's content is its own, drawn from a
  generator seeded by its place in the task: nothing (prefill, encoder output) can be shared between
  two samples, only between the runs of one, as in a real sweep. With a checkpoint, its processor
  builds the task's prompt around noise; with a bench preset (``preset``), the model has random
  weights at the preset's shape and the prompt is the bench's (text, the clip's features, text).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from kvprune.models.loading import LoadedModel
from kvprune.models.prompting import SAMPLING_RATE, Prompt

from ..bench.presets import Preset
from ..long_audio import model_inputs
from ..sweep.identity import digest, grade_hash, input_hash
from ..sweep.source import Checkpoints, PlannedSample, audio_seconds
from ..tasks.sample import Sample
from ..tasks.task import Task
from .answers import gold_answer_tokens, published_answer_tokens
from .published import published

SYNTHETIC = "synthetic"  # the ``meta`` key of a synthetic sample: its seconds, answer tokens and where they come from


def has_data(data_root, task: Task) -> bool:
    """Whether ``task``'s data is under ``data_root`` (else its samples are made up at published sizes)."""
    return data_root is not None and (Path(data_root) / task.data_dir).is_dir()


class GoldAnswers(Checkpoints):
    """A checkpoint on its tasks' data, each answer decoded to its gold answer's length (counted by
    ``tokenizer``, the checkpoint's)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def answer_tokens(self, planned: PlannedSample) -> int | None:
        return gold_answer_tokens(planned.sample.answer, self.tokenizer)


@dataclass
class SyntheticPrompts(Checkpoints):
    """Made-up prompts at each sample's audio length (see the module docstring). ``data_root``: take the
    samples' durations and gold answers from the data of the tasks it holds (the others, and None: from
    what is published)."""

    preset: Preset | None = None
    data_root: Path | None = None
    dry_run: str | None = None

    # -- the model: a checkpoint's, or random weights at a preset's shape -----------------------------
    def family(self, model_name: str, trust_remote_code: bool) -> str:
        return self.preset.family.name if self.preset else super().family(model_name, trust_remote_code)

    def skeleton(self, model_name: str, trust_remote_code: bool, attn_implementation: str):
        if self.preset is None:
            return super().skeleton(model_name, trust_remote_code, attn_implementation)
        return lambda: self.preset.family.build(self.preset.config(), attn_implementation=attn_implementation)

    def fingerprint(self, model_name: str, trust_remote_code: bool) -> str:
        if self.preset is None:
            return super().fingerprint(model_name, trust_remote_code)
        return f"preset:{self.preset.name}:random-weights:{digest(self.preset.config().to_dict())}"

    def load(self, model_name: str, config, device: str | None) -> LoadedModel:
        if self.preset is None:
            return super().load(model_name, config, device)
        device = torch.device(config.device or device or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtype = torch.bfloat16 if config.dtype == "auto" and device.type == "cuda" else (
            torch.float32 if config.dtype == "auto" else getattr(torch, config.dtype))
        model = self.preset.build(device, dtype, config.attn_implementation)
        pad = getattr(self.preset.family.decoder(model).config, "pad_token_id", None) or 0
        return RandomWeights(model_name, self.preset.family, model, SimpleNamespace(pad_token_id=pad, eos_token_id=None))

    # -- the samples ------------------------------------------------------------------------------------
    def samples(self, task: Task, config) -> list[Sample]:
        if has_data(self.data_root, task):
            return [self._from_data(task, sample) for sample in task.load(self.data_root, limit=config.limit, strict=False)
                    if not sample.problem]
        size = published(task.name)
        if size is None:
            raise ValueError(f"task {task.name}: nothing is published of its size here (harness/estimate/published.py); "
                             "give --data-root with its data.")
        count = min(size.samples, config.limit) if config.limit else size.samples
        low, high = size.seconds
        places = np.random.default_rng(0).permutation(count)  # lengths in a shuffled order, as data comes
        samples = []
        for index in range(count):
            seconds = round(low + (places[index] + 0.5) * (high - low) / count, 3)
            answer = published_answer_tokens(size.answer, seconds)
            samples.append(_synthetic(index, seconds, answer, f"published: {size.answer} answers", size.answer == "letter"))
        return samples

    def _from_data(self, task: Task, sample: Sample) -> Sample:
        seconds = audio_seconds(task.render(sample).files) or 0.0
        answer = gold_answer_tokens(sample.answer, None)
        return replace(_synthetic(sample.position, seconds, answer, "the data's gold answers, words counted", bool(sample.choices)),
                       id=sample.id, item=sample.item)

    def planned(self, task: Task, sample: Sample, digests, no_audio: bool = False) -> PlannedSample:
        meta = sample.meta[SYNTHETIC]
        prompt = None if self.preset is not None else task.render(sample)
        hashed = input_hash(f"{SYNTHETIC}:{sample.position}:{meta['seconds']}", [])
        return PlannedSample(sample, prompt, hashed, grade_hash(sample), meta["seconds"])

    def prepare(self, loaded: LoadedModel, task: Task, planned: PlannedSample, policy: str) -> dict:
        seconds, seed = planned.seconds, planned.sample.position
        if self.preset is not None:
            prompt = self.preset.prompt(loaded.model, seconds, 0, seed=seed)
            return dict(inputs=prompt.inputs, audio_seconds=seconds, audio_seconds_received=seconds, audio_clips=1,
                        long_audio=None, audio_tokens=prompt.audio_tokens)
        noise = np.random.default_rng(seed).standard_normal(max(1, round(seconds * SAMPLING_RATE))).astype(np.float32)
        segments = tuple(s if isinstance(s, str) else 0 for s in planned.prompt.segments)  # every clip: the noise
        return model_inputs(loaded, [0.05 * noise], Prompt(segments, planned.prompt.system), policy)

    def answer_tokens(self, planned: PlannedSample) -> int | None:
        return planned.sample.meta[SYNTHETIC]["answer_tokens"]


class RandomWeights(LoadedModel):
    """A model built with random weights at a preset's shape: no processor, answers shown as token ids."""

    def decode(self, ids: torch.Tensor) -> str:
        return " ".join(map(str, ids[0].tolist()))


def _synthetic(index: int, seconds: float, answer_tokens: int, source: str, choices: bool) -> Sample:
    """A made-up sample: its place in the task seeds its content; a question to fill the task's prompt."""
    return Sample(
        id=f"{SYNTHETIC}-{index:05d}", audio=(Path(f"{SYNTHETIC}-{index:05d}.wav"),),
        question="Which of the options does the recording hold?", choices=("one", "two", "three", "four") if choices else (),
        answer="A" if choices else "", position=index,
        meta={SYNTHETIC: dict(seconds=seconds, answer_tokens=answer_tokens, answer_source=source)},
    )
