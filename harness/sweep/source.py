"""Where a sweep's models and samples come from.

``Checkpoints`` is every ordinary sweep's: a model is a checkpoint (a local folder or a Hugging Face id,
``demo`` the embedded demo's folder), read before anything loads for its family and skeleton, digested
for its identity, loaded with its processor; a task's samples are its data under ``--data-root``, each
prompt rendered and its media read by the task's channel policy. A dry run (``kvprune sweep --preset``,
``harness.estimate.dry_run``) is the same sweep on another source: a model built with random weights
at a bench preset's shape, and synthetic samples at each task's published durations.

A source may also fix how long each sample's answer is (``answer_tokens``): random weights never stop
on their own, so a dry run decodes each row to its planned length, as a trained model ending its
answers there would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch.nn as nn

from kvprune.engine.clips import SCOPE_MODALITIES
from kvprune.models.loading import LoadedModel, family_of_checkpoint, load_model

from ..demo import DEMO, DEMO_MODEL_DIR
from ..long_audio import model_inputs
from ..setup.methods import checkpoint_skeleton
from ..tasks.task import Sample, Task
from .identity import AudioDigests, grade_hash, input_hash, model_fingerprint

VISUAL = SCOPE_MODALITIES["video"]  # the placeholders of the visual scope: video frames and images


@dataclass(frozen=True)
class PlannedSample:
    """One sample of a task with its prompt (None: the sample cannot run, or a synthetic one has none)
    and its input hash."""

    sample: Sample
    prompt: object | None  # a tasks.prompts.RenderedPrompt
    input_hash: str
    grade_hash: str  # the answer, options, item and metadata its score depends on (``identity.grade_hash``)
    seconds: float | None = None  # its audio's duration, what batches are ordered by (None: not known)


def model_path(model_name: str) -> str:
    """Where a model named on the command line is (``demo``: the embedded demo model's folder)."""
    return str(DEMO_MODEL_DIR) if model_name == DEMO else model_name


class Checkpoints:
    """Models from checkpoints, samples from each task's data (see the module docstring)."""

    dry_run: str | None = None  # a dry run's outputs say what they are (None: a real sweep)

    def family(self, model_name: str, trust_remote_code: bool) -> str:
        return family_of_checkpoint(model_path(model_name), trust_remote_code)[0].name

    def skeleton(self, model_name: str, trust_remote_code: bool, attn_implementation: str) -> Callable[[], nn.Module]:
        return checkpoint_skeleton(model_path(model_name), trust_remote_code, attn_implementation)

    def fingerprint(self, model_name: str, trust_remote_code: bool) -> str:
        return model_fingerprint(model_path(model_name), trust_remote_code)

    def load(self, model_name: str, config, device: str | None) -> LoadedModel:
        """The model, under the name the user gave."""
        loaded = load_model(model_path(model_name), dtype=config.dtype, device=device, device_map=config.device_map,
                            attn_implementation=config.attn_implementation, trust_remote_code=config.trust_remote_code)
        return replace(loaded, name=model_name)

    def samples(self, task: Task, config) -> list[Sample]:
        return task.load(config.data_root, limit=config.limit, strict=False)  # a bad item is its own error

    def planned(self, task: Task, sample: Sample, digests: AudioDigests, no_audio: bool = False) -> PlannedSample:
        if sample.problem:  # recorded as that sample's error, identified by what is wrong with it
            return PlannedSample(sample, None, input_hash(sample.problem, []), grade_hash(sample))
        prompt = task.render(sample, no_audio)
        hashed = input_hash(prompt.text, [digests(path) for path in prompt.files])
        return PlannedSample(sample, prompt, hashed, grade_hash(sample), audio_seconds(prompt.files))

    def prepare(self, loaded: LoadedModel, task: Task, planned: PlannedSample, policy: str) -> dict:
        """The model inputs of a sample, its audio read by the task's channel policy and fitted to what
        the model takes (the task's long-audio policy), with how much audio the model received."""
        waves, model_prompt = planned.prompt.load(task.channels)
        prepared = model_inputs(loaded, waves, model_prompt, policy)
        placeholders = loaded.placeholder_counts(prepared["inputs"]["input_ids"])
        if set(placeholders) & set(VISUAL):  # a model that sees: its video and image tokens, apart from audio's
            prepared["video_tokens"] = sum(placeholders.get(modality, 0) for modality in VISUAL)
        silent = planned.prompt.silent_videos(model_prompt)
        if silent is not None:  # the prompt's videos were to bring their sound tracks: how many had none
            prepared["silent_videos"] = silent
        return prepared

    def answer_tokens(self, planned: PlannedSample) -> int | None:
        """How many tokens the sample's answer is decoded to (None: until the model ends it)."""
        return None


def audio_seconds(files) -> float | None:
    """The seconds of audio in ``files`` (read from their headers); None where one cannot be read so
    (a video's sound track): such a sample keeps its place in the data's order."""
    import soundfile

    total = 0.0
    for path in files:
        try:
            info = soundfile.info(str(path))
        except Exception:  # not a sound file soundfile reads (a video, an image)
            return None
        total += info.frames / info.samplerate
    return total
