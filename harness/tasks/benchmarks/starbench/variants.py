"""STAR-Bench's protocol variants (``tasks.variants``): one item run several times, each run ``<item id>@<r>``.

- ``rotate_options`` (``direction``: ``right``, STAR-Bench's ``options[-r:] + options[:-r]``, or
  ``left``, ``options[r:] + options[:r]``; ``runs``: ``all``, one run per option, or a number, runs
  ``r = 0 .. runs-1`` with ``r`` taken modulo the option count): the gold letter is that of the first
  option equal to the gold option's text in the rotated list.
- ``starbench_clip_order``: STAR-Bench's temporal reasoning protocol, 3 runs showing the item's three
  clips in the orders ``rules.clip_order`` gives; the gold answer is recomputed from the order
  (``"clip a -> clip b -> clip c"``), the item's own ``answer`` is not used, and the options stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...prompts import LETTERS
from ...sample import Sample, TaskDataError
from ...variants import VARIANTS, Variant, variant_run
from . import rules


@VARIANTS.register("rotate_options")
@dataclass(frozen=True)
class RotateOptions(Variant):
    direction: str = "right"
    runs: int | str = "all"

    def __post_init__(self) -> None:
        if self.direction not in ("right", "left"):
            raise ValueError(f"direction={self.direction!r}: choose right (STAR-Bench) or left")
        if self.runs != "all" and (not isinstance(self.runs, int) or isinstance(self.runs, bool) or self.runs < 1):
            raise ValueError(f"runs={self.runs!r}: give all (one run per option) or a positive number")

    def __call__(self, sample: Sample) -> list[Sample]:
        count = len(sample.choices)
        if count < 2 or sample.answer not in LETTERS[:count]:
            raise TaskDataError(f"sample {sample.id}: rotate_options needs a multiple-choice sample with a gold letter")
        gold_text = sample.choices[LETTERS.index(sample.answer)]
        runs = count if self.runs == "all" else self.runs
        samples = []
        for r in range(runs):
            choices = self.rotate(sample.choices, r)
            samples.append(variant_run(sample, r, runs, choices=choices, answer=LETTERS[choices.index(gold_text)]))
        return samples

    def rotate(self, choices: tuple[str, ...], r: int) -> tuple[str, ...]:
        if self.direction == "right":
            return rules.rotate(choices, r)
        r %= len(choices)
        return choices[r:] + choices[:r]


@VARIANTS.register("starbench_clip_order")
@dataclass(frozen=True)
class StarBenchClipOrder(Variant):
    def __call__(self, sample: Sample) -> list[Sample]:
        if len(sample.audio) != 3:
            raise TaskDataError(f"sample {sample.id}: STAR-Bench's clip orders need exactly 3 clips, not {len(sample.audio)}")
        samples = []
        for r in range(rules.REASONING_RUNS):
            try:
                order = rules.clip_order(sample.item, r)
                gold = rules.letter(sample.choices, rules.temporal_answer(order))
            except ValueError as error:
                raise TaskDataError(f"sample {sample.id}: {error}") from None
            samples.append(variant_run(
                sample, r, rules.REASONING_RUNS, audio=tuple(sample.audio[k - 1] for k in order), answer=gold.strip("<>"),
                meta={"clip_order": "-".join(map(str, order))},
            ))
        return samples
