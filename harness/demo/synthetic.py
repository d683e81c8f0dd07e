"""A synthetic multiple-choice audio suite that needs no downloads and stresses pruning differently.

Every clip is 16 kHz mono noise with sounds placed in it, built with numpy from a seed, so the
suite is the same bit for bit wherever it is generated (same numpy version). Four tasks, four
options each (chance 25%), options always in the same order:

- ``pitch``: the register of a faint tone that lasts the whole clip, among louder short beeps of
  other registers. The evidence is spread over every audio token: pruning should hurt least.
- ``count``: how many beeps (1-4) at random times, among other sounds. Every beep must survive
  pruning, and a few tokens each: pruning that drops one beep changes the answer.
- ``event``: which one of four sound types occurs, once, somewhere in the clip. One local event
  (a click is a single token): a press keeps it only if it finds it.
- ``order``: which of two different sounds comes first. Both must survive, and where they are.

Files follow AudioMarathon's multiple-choice layout: ``<out>/<task>/<split>/audio/*.wav`` and
``<out>/<task>/<split>/meta.json``, a list of items with ``path`` (relative to the split folder),
``question``, ``choice_a``..``choice_d`` and ``answer_gt`` (a letter), plus the events placed.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import soundfile as sf

SAMPLING_RATE = 16_000
DEFAULT_DURATION_S = 15.0  # 375 LLM tokens at 25 per second; 1500 mel frames, not a multiple of 200
TASKS: tuple[str, ...] = ("pitch", "count", "event", "order")
LETTERS = "ABCD"
CHANCE = 0.25
INSTRUCTIONS = ("Answer with the letter.", "Reply with only the letter (A, B, C, or D).")


@dataclass(frozen=True)
class Item:
    """One question: its waveform (float32, exactly what the written WAV file reads back as) and meta."""

    wave: np.ndarray
    meta: dict


# -- sounds ------------------------------------------------------------------------------------------
def _ramp(n: int, fade: int) -> np.ndarray:
    """Raised-cosine fade in and out, so sounds start and stop without a click of their own."""
    envelope = np.ones(n)
    fade = min(fade, n // 2)
    if fade:
        rise = 0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, fade))
        envelope[:fade] = rise
        envelope[n - fade :] = rise[::-1]
    return envelope


def _tone(freq: float, n: int, harmonics=(1.0,), vibrato: float = 0.0, rng=None) -> np.ndarray:
    t = np.arange(n) / SAMPLING_RATE
    phase = 2 * np.pi * freq * t
    if vibrato:
        rate = rng.uniform(3.0, 6.0)
        phase += vibrato * freq / rate * np.sin(2 * np.pi * rate * t)
    wave = sum(a * np.sin(k * phase) for k, a in enumerate(harmonics, start=1))
    return wave / np.max(np.abs(wave))


def beep(rng, freq: float, seconds: float) -> np.ndarray:
    n = int(seconds * SAMPLING_RATE)
    return _tone(freq, n) * _ramp(n, int(0.01 * SAMPLING_RATE))


def click(rng) -> np.ndarray:
    """A sharp broadband transient of about 20 ms: one LLM token."""
    n = int(0.02 * SAMPLING_RATE)
    decay = np.exp(-np.arange(n) / (0.003 * SAMPLING_RATE))
    wave = rng.standard_normal(n) * decay
    wave[0] = 3.0
    return wave / np.max(np.abs(wave))


def whistle(rng) -> np.ndarray:
    return beep(rng, rng.uniform(2200.0, 3200.0), rng.uniform(0.25, 0.4))


def chirp(rng) -> np.ndarray:
    """An exponential sweep up from about 500 Hz to about 3 kHz."""
    n = int(rng.uniform(0.25, 0.4) * SAMPLING_RATE)
    f0, f1 = rng.uniform(400.0, 600.0), rng.uniform(2500.0, 3500.0)
    t = np.arange(n) / SAMPLING_RATE
    duration = n / SAMPLING_RATE
    k = np.log(f1 / f0) / duration
    phase = 2 * np.pi * f0 * (np.exp(k * t) - 1) / k
    return np.sin(phase) * _ramp(n, int(0.01 * SAMPLING_RATE))


def buzz(rng) -> np.ndarray:
    """A harmonic-rich low buzz (sawtooth-like, 12 harmonics of 90-140 Hz)."""
    n = int(rng.uniform(0.25, 0.4) * SAMPLING_RATE)
    harmonics = tuple(1.0 / k for k in range(1, 13))
    return _tone(rng.uniform(90.0, 140.0), n, harmonics) * _ramp(n, int(0.01 * SAMPLING_RATE))


EVENTS: dict[str, Callable] = {"click": click, "whistle": whistle, "chirp": chirp, "buzz": buzz}
REGISTERS = {"low": (100.0, 160.0), "medium-low": (220.0, 340.0), "medium-high": (500.0, 780.0), "high": (1200.0, 1900.0)}

QUESTIONS = {
    "pitch": "Which register is the steady tone that lasts through the whole clip?",
    "count": "How many beeps are there in the clip?",
    "event": "Which of these sounds occurs once in the clip?",
    "order": "Which of these sounds comes first in the clip?",
}
_SOUND_CHOICES = ("a click", "a whistle", "a rising chirp", "a buzz")  # in the order of EVENTS
CHOICES = {
    "pitch": ("low", "medium low", "medium high", "high"),  # in the order of REGISTERS
    "count": ("1", "2", "3", "4"),
    "event": _SOUND_CHOICES,
    "order": _SOUND_CHOICES,
}


# -- backgrounds -------------------------------------------------------------------------------------
def background(rng, n: int) -> np.ndarray:
    """Colored noise (spectral slope drawn per clip) with a slow swell, and sometimes a mains hum."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1.0 / SAMPLING_RATE)
    spectrum *= np.maximum(freqs, 20.0) ** -rng.uniform(0.0, 0.8)
    noise = np.fft.irfft(spectrum, n)
    noise *= rng.uniform(0.01, 0.04) / np.sqrt(np.mean(noise**2))
    t = np.arange(n) / SAMPLING_RATE
    noise *= 1.0 + 0.3 * np.sin(2 * np.pi * rng.uniform(0.05, 0.3) * t + rng.uniform(0, 2 * np.pi))
    if rng.random() < 0.5:
        noise += rng.uniform(0.005, 0.02) * _tone(rng.choice([50.0, 60.0]), n, (1.0, 0.5, 0.3))
    return noise


def noise_swell(rng) -> np.ndarray:
    """A band of noise rising and falling over about a second: a distractor like no target sound."""
    n = int(rng.uniform(0.6, 1.2) * SAMPLING_RATE)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1.0 / SAMPLING_RATE)
    centre = rng.uniform(300.0, 4000.0)
    spectrum *= np.exp(-0.5 * ((freqs - centre) / (0.3 * centre)) ** 2)
    wave = np.fft.irfft(spectrum, n) * np.hanning(n)
    return wave / np.max(np.abs(wave))


class _Timeline:
    """Places sounds at random times without overlap (a gap of ``gap_s`` between any two)."""

    def __init__(self, rng, n: int, gap_s: float):
        self.rng, self.n, self.gap = rng, n, int(gap_s * SAMPLING_RATE)
        self.taken: list[tuple[int, int]] = []

    def free_start(self, length: int) -> int:
        margin = int(0.3 * SAMPLING_RATE)
        for _ in range(1000):
            start = int(self.rng.integers(margin, self.n - margin - length))
            if all(start + length + self.gap <= a or b + self.gap <= start for a, b in self.taken):
                self.taken.append((start, start + length))
                return start
        raise RuntimeError("no room left in the clip for another sound")


def _place(wave, timeline, name: str, sound: np.ndarray, peak: float, events: list) -> int:
    """Add ``sound`` (scaled to ``peak``) at a free time and record it in ``events``."""
    start = timeline.free_start(len(sound))
    wave[start : start + len(sound)] += peak * sound
    events.append({"sound": name, "start_s": round(start / SAMPLING_RATE, 3), "seconds": round(len(sound) / SAMPLING_RATE, 3)})
    return start


# -- tasks -------------------------------------------------------------------------------------------
def _pitch(rng, n: int):
    """A faint steady tone over the whole clip (a few short gaps), among louder short beeps."""
    names = list(REGISTERS)
    answer = int(rng.integers(4))
    wave = background(rng, n)
    tone = _tone(rng.uniform(*REGISTERS[names[answer]]), n, (1.0, 0.5, 0.25), vibrato=0.01, rng=rng)
    for _ in range(int(rng.integers(0, 3))):  # short gaps in the tone
        length = int(rng.uniform(0.3, 1.0) * SAMPLING_RATE)
        start = int(rng.integers(0, n - length))
        tone[start : start + length] *= 1.0 - _ramp(length, int(0.05 * SAMPLING_RATE))
    wave += rng.uniform(0.04, 0.1) * tone
    timeline, events = _Timeline(rng, n, gap_s=0.3), []
    for _ in range(int(rng.integers(3, 7))):
        other = names[int(rng.choice([i for i in range(4) if i != answer]))]
        sound = beep(rng, rng.uniform(*REGISTERS[other]), rng.uniform(0.1, 0.25))
        _place(wave, timeline, f"beep-{other}", sound, rng.uniform(0.15, 0.35), events)
    events.sort(key=lambda e: e["start_s"])
    return wave, answer, events


def _count(rng, n: int):
    """1-4 identical beeps at random times, and 0-3 other sounds that are not beeps."""
    answer = int(rng.integers(4))
    wave = background(rng, n)
    timeline, events = _Timeline(rng, n, gap_s=0.5), []
    freq, seconds, peak = rng.uniform(700.0, 1300.0), rng.uniform(0.15, 0.3), rng.uniform(0.12, 0.35)
    for _ in range(answer + 1):
        _place(wave, timeline, "beep", beep(rng, freq, seconds), peak * rng.uniform(0.8, 1.0), events)
    for _ in range(int(rng.integers(0, 4))):
        name = str(rng.choice(["click", "whistle", "buzz"]))
        _place(wave, timeline, name, EVENTS[name](rng), rng.uniform(0.12, 0.35), events)
    events.sort(key=lambda e: e["start_s"])
    return wave, answer, events


def _distracting_swells(rng, wave, timeline, events) -> None:
    for _ in range(int(rng.integers(1, 4))):
        _place(wave, timeline, "swell", noise_swell(rng), rng.uniform(0.03, 0.1), events)


def _event(rng, n: int):
    """One sound of four kinds, once, somewhere; noise swells as distractors."""
    names = list(EVENTS)
    answer = int(rng.integers(4))
    wave = background(rng, n)
    timeline, events = _Timeline(rng, n, gap_s=0.3), []
    _place(wave, timeline, names[answer], EVENTS[names[answer]](rng), rng.uniform(0.15, 0.4), events)
    _distracting_swells(rng, wave, timeline, events)
    events.sort(key=lambda e: e["start_s"])
    return wave, answer, events


def _order(rng, n: int):
    """Two different sounds at least 1.5 s apart; which comes first."""
    names = list(EVENTS)
    first, second = rng.choice(4, size=2, replace=False)
    wave = background(rng, n)
    timeline, events = _Timeline(rng, n, gap_s=1.5), []
    starts = []
    for index in (first, second):
        name = names[int(index)]
        starts.append(_place(wave, timeline, name, EVENTS[name](rng), rng.uniform(0.15, 0.4), events))
    answer = int(first) if starts[0] < starts[1] else int(second)
    timeline.gap = int(0.3 * SAMPLING_RATE)  # distractors may come closer than the two targets
    _distracting_swells(rng, wave, timeline, events)
    events.sort(key=lambda e: e["start_s"])
    return wave, answer, events


_BUILDERS = {"pitch": _pitch, "count": _count, "event": _event, "order": _order}


# -- items and files ---------------------------------------------------------------------------------
def _quantize(wave: np.ndarray) -> np.ndarray:
    """16-bit PCM values, scaled down first if the mix would clip."""
    peak = np.max(np.abs(wave))
    if peak > 0.98:
        wave = wave * (0.98 / peak)
    return np.round(wave * 32767.0).astype(np.int16)


def make_item(task: str, split: str, index: int, *, seed: int = 0, duration_s: float = DEFAULT_DURATION_S) -> Item:
    """Item ``index`` of ``task``/``split``; it depends only on these arguments, so items can be made
    in any order or in parallel (the split name is hashed into the seed)."""
    if task not in _BUILDERS:
        raise ValueError(f"unknown task {task!r}; tasks: {', '.join(TASKS)}")
    rng = np.random.default_rng([seed, TASKS.index(task), zlib.crc32(split.encode()), index])
    n = int(round(duration_s * SAMPLING_RATE))
    wave, answer, events = _BUILDERS[task](rng, n)
    pcm = _quantize(wave)
    meta = {
        "path": f"audio/{task}_{split}_{index:04d}.wav",
        "question": QUESTIONS[task],
        **{f"choice_{letter.lower()}": choice for letter, choice in zip(LETTERS, CHOICES[task])},
        "answer_gt": LETTERS[answer],
        "task_name": task,
        "id": f"{task}-{split}-{index:04d}",
        "duration_s": duration_s,
        "events": events,
    }
    return Item(wave=pcm.astype(np.float32) / 32768.0, meta=meta)


def format_prompt(meta: dict, instruction: str = INSTRUCTIONS[0]) -> str:
    """The user text that follows the audio: question, lettered options, instruction.

    The demo model is trained on this layout with each of ``INSTRUCTIONS``."""
    options = "\n".join(f"{letter}. {meta['choice_' + letter.lower()]}" for letter in LETTERS)
    return f"{meta['question']}\n{options}\n{instruction}"


def write_split(out_dir: str | Path, task: str, split: str, size: int, *, seed: int = 0,
                duration_s: float = DEFAULT_DURATION_S) -> Path:
    """Write one ``<task>/<split>`` folder: WAV files (16-bit PCM) and meta.json."""
    folder = Path(out_dir) / task / split
    (folder / "audio").mkdir(parents=True, exist_ok=True)
    metas = []
    for index in range(size):
        item = make_item(task, split, index, seed=seed, duration_s=duration_s)
        pcm = np.round(item.wave * 32768.0).astype(np.int16)
        sf.write(folder / item.meta["path"], pcm, SAMPLING_RATE, subtype="PCM_16", format="WAV")
        metas.append(item.meta)
    (folder / "meta.json").write_text(json.dumps(metas, indent=1) + "\n")
    return folder


def generate_suite(out_dir: str | Path, *, seed: int = 0, splits: dict[str, int] | None = None,
                   duration_s: float = DEFAULT_DURATION_S, tasks: tuple[str, ...] = TASKS) -> Path:
    """Write every task's splits under ``out_dir`` (default: a held-out "test" split of 20 per task)."""
    out_dir = Path(out_dir)
    for task in tasks:
        for split, size in (splits or {"test": 20}).items():
            write_split(out_dir, task, split, size, seed=seed, duration_s=duration_s)
    return out_dir


def suite_manifest(out_dir: str | Path) -> dict[str, str]:
    """sha256 of every file under ``out_dir``, keyed by its path relative to ``out_dir`` (posix)."""
    out_dir = Path(out_dir)
    return {
        path.relative_to(out_dir).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(out_dir.rglob("*"))
        if path.is_file()
    }
