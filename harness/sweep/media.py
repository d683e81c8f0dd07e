"""What each model can be shown, checked before the first sample: a task whose samples hold images or
videos runs only on a model that takes them through its processor's chat template (``check_media``).

Otherwise every row would fail the same way (the demo model's template writes no ``<|VIDEO|>``
placeholder, so the processor finds "0 <|VIDEO|> tokens" for its one video); refusing up front names
the reason once. Only the processor is read (``kvprune.models.loading.load_processor``), and only for
sweeps that show images or videos.
"""

from __future__ import annotations

from kvprune.models import list_families
from kvprune.models.loading import family_of_checkpoint, load_processor

from ..tasks.prompts import ImageRef, VideoRef
from .config import SweepConfig, SweepConfigError
from .source import PlannedSample, model_path

KINDS = {ImageRef: "image", VideoRef: "video"}


def media_kinds(samples: list[PlannedSample]) -> dict[str, int]:
    """How many of ``samples`` show each media kind ("image", "video") their prompts hold."""
    counts: dict[str, int] = {}
    for planned in samples:
        segments = planned.prompt.segments if planned.prompt is not None else ()
        for kind in {KINDS[type(s)] for s in segments if type(s) in KINDS}:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def check_media(config: SweepConfig, tasks: dict[str, list], planned: dict[str, list[PlannedSample]]) -> None:
    """Refuse (``SweepConfigError``, before anything runs) a model that cannot take the images or
    videos of a task it is to run; ``tasks``: each model's, ``planned``: each task's samples."""
    for name in config.models:
        needed = {task.name: media_kinds(planned[task.name]) for task in tasks[name]}
        if not any(needed.values()):
            continue
        family = family_of_checkpoint(model_path(name), config.trust_remote_code)[0]
        kinds_needed = sorted({kind for kinds in needed.values() for kind in kinds})
        if _sees(family):
            processor = load_processor(model_path(name), family, config.trust_remote_code)
            dropped = family.prompting.build_inputs.dropped_media(processor, kinds_needed)
        else:
            dropped = {kind: f"{family.display_name} takes no {kind}s" for kind in kinds_needed}
        for task, kinds in needed.items():
            for kind in sorted(set(kinds) & set(dropped)):
                seeing = " or ".join(f.display_name for f in list_families() if _sees(f))
                raise SweepConfigError(
                    f"model {name} cannot be shown the {kind}s of task {task} ({kinds[kind]} of {len(planned[task])} "
                    f"samples hold one): {dropped[kind]}. Run a model that takes {kind}s (a released {seeing} checkpoint), or "
                    f"leave {task} out of --tasks."
                )


def _sees(family) -> bool:
    """Whether the family takes images and videos (its prompts' ``ChatFormat`` says so)."""
    return bool(getattr(family.prompting.build_inputs, "vision", False))
