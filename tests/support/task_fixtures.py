"""Small datasets in the native layout of each AudioMarathon task, with real audio files.

Each writer puts one task's data under ``root`` the way AudioMarathon's scripts read it and returns
what loading it must give: ``(sample id, gold answer)`` in load order, the gold being the option
letter worked out here from where the right option was placed (or the transcript, for ASR).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf

SAMPLE_RATE = 16_000


CLIP_SECONDS = 0.05  # tests that run a model on the fixtures set this longer, so there is audio to prune


@contextmanager
def clip_seconds(seconds: float):
    """Clips written in the block last ``seconds`` (a model needs audio tokens to prune)."""
    global CLIP_SECONDS
    saved, CLIP_SECONDS = CLIP_SECONDS, seconds
    try:
        yield
    finally:
        CLIP_SECONDS = saved


def write_audio(path: Path, seconds: float | None = None) -> Path:
    """A short tone; the suffix picks the format (.wav or .flac)."""
    seconds = CLIP_SECONDS if seconds is None else seconds
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(SAMPLE_RATE * seconds)) / SAMPLE_RATE
    sf.write(path, 0.1 * np.sin(2 * np.pi * 440 * t), SAMPLE_RATE)
    return path


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def letter(choices: list[str], right: str) -> str:
    return "ABCDE"[choices.index(right)]


def four_choice_items(paths: list[str], rights: list[str], options: list[str], **extra) -> list[dict]:
    """Items with choice_a..choice_d, the right option rotated into a different slot each time."""
    items = []
    for n, (path, right) in enumerate(zip(paths, rights)):
        others = [o for o in options if o != right][:3]
        choices = others[: n % 4] + [right] + others[n % 4 :]
        choice_fields = dict(zip(["choice_a", "choice_b", "choice_c", "choice_d"], choices))
        items.append({
            "path": path, "question": f"Question {n}?", **choice_fields, "answer_gt": letter(choices, right),
            **{k: v[n] for k, v in extra.items()},
        })
    return items


def librispeech(root: Path) -> list[tuple[str, str]]:
    """A native chapter (trans.txt) and a LibriSpeech-long one (one .txt per recording)."""
    chapter = root / "LibriSpeech" / "test-clean" / "1089" / "134686"
    lines = {
        "1089-134686-0000": "HE HOPED THERE WOULD BE STEW FOR DINNER",
        "1089-134686-0001": "STUFF IT INTO YOU HIS BELLY COUNSELLED HIM",
    }
    for utterance in lines:
        write_audio(chapter / f"{utterance}.flac")
    (chapter / "1089-134686.trans.txt").write_text("".join(f"{u} {t}\n" for u, t in lines.items()))
    long = write_audio(root / "LibriSpeech" / "test-clean" / "121" / "121726" / "121-121726-0000.flac")
    long.with_suffix(".txt").write_text("ALSO A POPULAR CONTRIVANCE WHEREBY LOVE MAKING MAY BE SUSPENDED\n")
    return [*lines.items(), ("121-121726-0000", "ALSO A POPULAR CONTRIVANCE WHEREBY LOVE MAKING MAY BE SUSPENDED")]


def race(root: Path) -> list[tuple[str, str]]:
    """Two questions on one passage, one on another; answers are letters."""
    folder = root / "RACE"
    for name in ("high/h1.wav", "middle/m1.wav"):
        write_audio(folder / name)

    def item(audio, question, options, answer, article):
        return {"audio_path": audio, "question": question, "options": options, "answer": answer, "article_id": article}

    items = [
        item("high/h1.wav", "Why did Tom leave?", ["rain", "work", "fear", "love"], "B", "h1"),
        item("high/h1.wav", "Where is Tom?", ["home", "school", "park", "shop"], "D", "h1"),
        item("middle/m1.wav", "Who wrote it?", ["Ann", "Bob", "Cid", "Dan"], "A", "m1"),
    ]
    write_json(folder / "race_benchmark.json", items)
    return [("high/h1.wav", "B"), ("high/h1.wav#2", "D"), ("middle/m1.wav", "A")]


def slue(root: Path) -> list[tuple[str, str]]:
    folder = root / "SLUE"
    paths, rights = ["audio/s0.wav", "audio/s1.wav"], ["Paris", "Obama"]
    items = four_choice_items(paths, rights, ["Paris", "Obama", "London", "Nike", "Texas"], task_name=["ner", "ner"])
    for path in paths:
        write_audio(folder / path)
    write_json(folder / "merged_audio_data.json", items)
    return [(p, i["answer_gt"]) for p, i in zip(paths, items)]


def tau(root: Path) -> list[tuple[str, str]]:
    """Three scenes; one gold letter is written lower-case, as hand-made files sometimes are."""
    folder = root / "TAU"
    paths, rights = ["airport/a0.wav", "park/p0.wav", "metro/m0.wav"], ["Airport", "Park", "Metro station"]
    options = ["Airport", "Park", "Metro station", "Bus", "Tram"]
    items = four_choice_items(paths, rights, options, scene_label=["airport", "park", "metro"])
    items[1]["answer_gt"] = items[1]["answer_gt"].lower()
    for path in paths:
        write_audio(folder / path)
    write_json(folder / "acoustic_scene_task_meta.json", items)
    return [(p, i["answer_gt"].upper()) for p, i in zip(paths, items)]


def gtzan(root: Path) -> list[tuple[str, str]]:
    """Metadata at the task folder, audio under wav/ (AudioMarathon's Qwen and Voxtral scripts)."""
    folder = root / "GTZAN"
    paths, rights = ["blues/blues.00001.wav", "jazz/jazz.00002.wav"], ["Blues", "Jazz"]
    items = four_choice_items(paths, rights, ["Blues", "Jazz", "Rock", "Pop", "Metal"], genre_label=["blues", "jazz"])
    for path in paths:
        write_audio(folder / "wav" / path)
    write_json(folder / "music_genre_classification_meta.json", items)
    return [(p, i["answer_gt"]) for p, i in zip(paths, items)]


def desed(root: Path) -> list[tuple[str, str]]:
    """{"tasks": [...]} with the choices in an object keyed A-D."""
    folder = root / "DESED"
    write_audio(folder / "mix_0.wav")
    write_audio(folder / "mix_1.wav")
    def task(path, options, answer):
        return {"path": path, "task_type": "presence", "question": "Which sound occurs?",
                "choices": dict(zip("ABCD", options)), "answer_gt": answer}

    tasks = [
        task("mix_0.wav", ["Dog", "Blender", "Cat", "Dishes"], "C"),
        task("mix_1.wav", ["Speech", "Bell", "Frying", "Alarm"], "A"),
    ]
    write_json(folder / "desed_sound_event_detection_task.json", {"tasks": tasks})
    return [("mix_0.wav", "C"), ("mix_1.wav", "A")]


def vesus(root: Path) -> list[tuple[str, str]]:
    """Includes a "happy" clip of speaker 2, which AudioMarathon's loader drops."""
    folder = root / "VESUS"
    paths, rights = ["p1/angry_0.wav", "p2/happy_0.wav", "p3/sad_0.wav"], ["Angry", "Happy", "Sad"]
    items = four_choice_items(paths, rights, ["Angry", "Happy", "Sad", "Fearful", "Neutral"],
                              emotion_label=["angry", "Happy", "sad"], person_id=[1, 2, 3])
    for path in paths:
        write_audio(folder / path)
    write_json(folder / "audio_emotion_dataset.json", items)
    return [(p, i["answer_gt"]) for p, i in zip(paths, items) if i["person_id"] != 2]


def had(root: Path, real: int = 2, fake: int = 1) -> list[tuple[str, str]]:
    """real/*.wav and fake/*.wav: a = real, b = fake."""
    names = [f"real/r{i}.wav" for i in range(real)] + [f"fake/f{i}.wav" for i in range(fake)]
    for name in names:
        write_audio(root / "HAD" / name)
    return [(name, "A" if name.startswith("real") else "B") for name in names]


def gtzan_and_had(root: Path, real: int = 2, fake: int = 1) -> Path:
    """The sweep tests' usual pair of tasks in ``root``, with clips of 2 s (50 audio tokens: audio to prune)."""
    with clip_seconds(2.0):
        gtzan(root)
        had(root, real=real, fake=fake)
    return root


AGE_GROUPS = ["Young Adult (18-30)", "Early Career (31-40)", "Mid Career (41-50)", "Senior (51-70)", "Elderly (71+)"]


def vox_age(root: Path) -> list[tuple[str, str]]:
    """Five choices; the gold is the age group's text."""
    folder = root / "VoxCeleb"
    paths, golds = ["id0001/a.wav", "id0002/b.wav"], ["Senior (51-70)", "young adult (18-30)"]
    items = []
    for path, gold in zip(paths, golds):
        write_audio(folder / "wav" / path)
        items.append({"path": path, "question": "What is the speaker's age group?",
                      **dict(zip(["choice_a", "choice_b", "choice_c", "choice_d", "choice_e"], AGE_GROUPS)),
                      "answer_gt": gold, "speaker_id_original": path.split("/")[0]})
    write_json(folder / "age_classification_task_meta.json", items)
    return [(path, "ABCDE"[[g.lower() for g in AGE_GROUPS].index(gold.lower())]) for path, gold in zip(paths, golds)]


def vox_gender(root: Path) -> list[tuple[str, str]]:
    """choice_a Male, choice_b Female; the gold is the gender's text, in any case."""
    folder = root / "VoxCeleb"
    paths, golds = ["id0003/c.wav", "id0004/d.wav"], ["Female", "male"]
    for path in paths:
        write_audio(folder / "wav" / path)
    items = [{"path": p, "question": "What is the gender of the speaker?", "choice_a": "Male", "choice_b": "Female",
              "answer_gt": g, "speaker_id_original": p.split("/")[0]} for p, g in zip(paths, golds)]
    write_json(folder / "gender_id_task_meta.json", items)
    return [("id0003/c.wav", "B"), ("id0004/d.wav", "A")]


WRITERS = {
    "librispeech": librispeech, "race": race, "slue": slue, "tau": tau, "gtzan": gtzan,
    "desed": desed, "vesus": vesus, "had": had, "vox_age": vox_age, "vox_gender": vox_gender,
}


def every_task(root: Path, seconds: float = 1.0) -> Path:
    """Every AudioMarathon task's fixture under ``root``, its clips ``seconds`` long (enough to prune)."""
    with clip_seconds(seconds):
        for writer in WRITERS.values():
            writer(root)
    return root
