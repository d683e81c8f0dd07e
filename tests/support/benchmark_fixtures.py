"""Small datasets in the official layout of each seed benchmark (STAR-Bench, MMAU, MMAR, AVI-Bench,
ST-AudioQA's provisional one), with real audio files: multi-clip, stereo and 4-channel items.

Each writer puts one benchmark's data under ``root`` and returns its items as written, so tests can
work out by hand what loading, prompting and scoring must give.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.support.task_fixtures import write_json

SAMPLE_RATE = 16_000
SECONDS = 1.0  # 25 audio tokens for the demo model: enough to prune


def written(root: Path, *writers) -> Path:
    """``root`` after each writer put its benchmark's data there (a data root for several tasks)."""
    for write in writers:
        write(root)
    return root


def write_channels(path: Path, channels: int = 1, seconds: float = SECONDS, rate: int = SAMPLE_RATE) -> Path:
    """A tone per channel, channel ``c`` at ``(c + 1) * 110`` Hz and amplitude ``0.05 * (c + 1)``, so
    every channel is told apart."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(rate * seconds)) / rate
    data = np.stack([0.05 * (c + 1) * np.sin(2 * np.pi * 110 * (c + 1) * t) for c in range(channels)], axis=1)
    sf.write(path, data, rate, subtype="FLOAT")
    return path


# -- STAR-Bench ---------------------------------------------------------------------------------------

TEMPORAL_OPTIONS = [" -> ".join(f"clip {i}" for i in order) for order in itertools.permutations((1, 2, 3))]


def starbench(root: Path) -> dict[str, list[dict]]:
    """``<root>/STAR-Bench``: perception items (one with two clips, one whose gold text is also a
    later option), binaural spatial items, temporal items of three clips with caption and uncut
    recording. Returns the items per part."""
    base = root / "STAR-Bench"
    pc = [
        {"id": "pc_pitch_1", "task": "perception", "category": "acoustic", "sub-category": "pitch",
         "question": "Which clip is higher?", "options": ["the first", "the second", "both equal"],
         "answer": "the second", "audio_paths": ["starbench_audios/pc/p1a.wav", "starbench_audios/pc/p1b.wav"]},
        {"id": "pc_pitch_2", "task": "perception", "category": "acoustic", "sub-category": "pitch",
         "question": "Is the tone rising?", "options": ["yes", "no"], "answer": "no",
         "audio_paths": ["starbench_audios/pc/p2.wav"]},
        {"id": "pc_loud_1", "task": "perception", "category": "acoustic", "sub-category": "loudness",
         "question": "How loud is it?", "options": ["quiet", "loud", "quiet", "medium"], "answer": "quiet",
         "audio_paths": ["starbench_audios/pc/l1.wav"]},
        {"id": "pc_dir_1", "task": "perception", "category": "spatial", "sub-category": "direction",
         "question": "Where is the source?", "options": ["left", "right"], "answer": "right",
         "audio_paths": ["starbench_audios/pc/d1.wav"]},
    ]
    sr = [
        {"id": "sr_move_1", "task": "spatial reasoning", "category": "spatial", "sub-category": "movement",
         "question": "Where does the car go?", "options": ["left to right", "right to left", "it stays"],
         "answer": "left to right", "audio_paths": ["starbench_audios/holistic_reasoning/spatial/cars/s1.wav"]},
        {"id": "sr_count_1", "task": "spatial reasoning", "category": "spatial", "sub-category": "counting",
         "question": "How many sources?", "options": ["1", "2", "3", "4"], "answer": "2",
         "audio_paths": ["starbench_audios/holistic_reasoning/spatial/s2.wav"]},
    ]
    tr = [
        {"id": "tr_scene_OSM_1", "task": "temporal reasoning", "category": "temporal", "sub-category": "OSM",
         "question": "Put the clips in order.", "options": TEMPORAL_OPTIONS, "answer": TEMPORAL_OPTIONS[0],
         "audio_paths": [f"starbench_audios/tr/osm1_{i}.wav" for i in (1, 2, 3)],
         "global_caption": "A door opens, steps, a door closes.", "uncut_audio_path": "starbench_audios/tr/osm1.wav"},
        {"id": "tr_scene_TAO_4", "task": "temporal reasoning", "category": "temporal", "sub-category": "TAO",
         "question": "Restore the order.", "options": TEMPORAL_OPTIONS, "answer": TEMPORAL_OPTIONS[0],
         "audio_paths": [f"starbench_audios/tr/tao4_{i}.wav" for i in (1, 2, 3)],
         "global_caption": "Rain starts, thunder, rain stops.", "uncut_audio_path": "starbench_audios/tr/tao4.wav"},
    ]
    for items, name, channels in ((pc, "foundation_perception", 1), (sr, "holistic_reasoning_spatial", 2),
                                  (tr, "holistic_reasoning_temporal", 1)):
        for item in items:
            for path in item["audio_paths"] + ([item["uncut_audio_path"]] if "uncut_audio_path" in item else []):
                write_channels(base / path, channels)
        write_json(base / "meta_info" / f"{name}.json", items)
    return {"pc": pc, "sr": sr, "tr": tr}


# -- MMAU, MMAR ----------------------------------------------------------------------------------------


def mmau(root: Path) -> list[dict]:
    """``<root>/MMAU/mmau-test-mini.json``: a JSON list; the second item's gold equals two options."""
    items = [
        {"id": "m-1", "audio_id": "./test-mini-audios/m-1.wav", "question": "What is the dog doing?",
         "choices": ["barking", "sleeping", "eating", "running"], "answer": "barking", "dataset": "toy",
         "task": "sound", "split": "test-mini", "category": "Sound", "sub-category": "animals", "difficulty": "easy"},
        {"id": "m-2", "audio_id": "./test-mini-audios/m-2.wav", "question": "Which instrument plays?",
         "choices": ["piano", "violin", "piano", "drums"], "answer": "piano", "dataset": "toy",
         "task": "music", "split": "test-mini", "category": ["Music", "Instrument"], "sub-category": "instruments",
         "difficulty": "hard"},
        {"id": "m-3", "audio_id": "./test-mini-audios/m-3.wav", "question": "What is the order?",
         "choices": ["Mono first, stereo later", "Stereo first, mono later", "Only mono"],
         "answer": "Mono first, stereo later", "dataset": "toy", "task": "speech", "split": "test-mini",
         "category": "Speech", "sub-category": "order", "difficulty": "medium"},
    ]
    for item in items:
        write_channels(root / "MMAU" / item["audio_id"])
    write_json(root / "MMAU" / "mmau-test-mini.json", items)
    return items


def mmar(root: Path) -> list[dict]:
    """``<root>/MMAR/MMAR-meta.jsonl``: JSON lines; one item has an empty option."""
    items = [
        {"id": "r-1", "audio_path": "./audio/r-1.wav", "question": "How many speakers?", "choices": ["one", "two", ""],
         "answer": "two", "modality": "speech", "category": "Perception Layer", "sub-category": "Counting",
         "language": "en", "source": "toy", "url": "", "timestamp": "", "thinking": "", "cue": "", "rubric": []},
        {"id": "r-2", "audio_path": "./audio/r-2.wav", "question": "Which genre?", "choices": ["jazz", "rock"],
         "answer": "rock", "modality": "music", "category": "Cultural Layer", "sub-category": "Genre",
         "language": "en", "source": "toy", "url": "", "timestamp": "", "thinking": "", "cue": "", "rubric": []},
    ]
    for item in items:
        write_channels(root / "MMAR" / item["audio_path"])
    path = root / "MMAR" / "MMAR-meta.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    return items


# -- AVI-Bench ----------------------------------------------------------------------------------------


def _avi_entry(entry_id, task, subtask, prompt, text, options, answer, audio):
    return {"id": entry_id, "task": task, "subtask": subtask,
            "input": {"question": {"prompt": prompt, "text": text, "options": options}, "audio_list": [audio],
                      "image_list": None, "video": None},
            "output": {"question_answer": answer}}


def avibench_asqa(root: Path) -> list[dict]:
    """``<root>/AVI-Bench/levels/sensation/ASQA``: formal entries and their ``pre_`` checks placed
    after them; a numeric answer without options."""
    folder = root / "AVI-Bench" / "levels" / "sensation" / "ASQA"
    entries = [
        _avi_entry("00000", "ASQA", "sound_order", None, "Which comes first, the sound or the noise?",
                   "options_sound_order", "sound", "./input/00000.wav"),
        _avi_entry("pre_00000", "ASQA", "sound_order", None, "Can you hear anything?", "options_yes_no", "yes",
                   "./input/00000.wav"),
        _avi_entry("00001", "ASQA", "beats_counting", None, "How many beats?", None, "4", "./input/00001.wav"),
        _avi_entry("00002", "ASQA", "sound_volume", None, "Which is louder?", "options_sound_volume", "first",
                   "./input/00002.wav"),
        _avi_entry("pre_00002", "ASQA", "sound_volume", None, "Can you hear anything?", "options_yes_no", "yes",
                   "./input/00002.wav"),
    ]
    for name in ("00000", "00001", "00002"):
        write_channels(folder / "input" / f"{name}.wav")
    write_json(folder / "data.json", entries)
    return entries


def avibench_amic(root: Path) -> list[dict]:
    folder = root / "AVI-Bench" / "levels" / "perception" / "AMIC"
    entries = [
        _avi_entry("10000", "AMIC", "animals", "prompt_amic", "What is sounding?", "amic_cls_list",
                   {"dog": 2, "cat": 1}, "./input/10000.wav"),
        _avi_entry("10001", "AMIC", "music", "prompt_amic", "What is sounding?", "amic_cls_list", {"piano": 1},
                   "./input/10001.wav"),
    ]
    for name in ("10000", "10001"):
        write_channels(folder / "input" / f"{name}.wav")
    write_json(folder / "data.json", entries)
    return entries


# -- ST-AudioQA (provisional layout) ------------------------------------------------------------------


def staudioqa(root: Path) -> dict[str, list[dict]]:
    """``<root>/ST-AudioQA/type_{a,c}.jsonl`` over 4-channel first-order ambisonic scenes (ACN)."""
    folder = root / "ST-AudioQA"
    a = [
        {"id": "a1", "audio": "audio/s1.wav", "qa_type": "A", "family": "event semantics", "kind": "detection",
         "question": "What sound events are present?", "answer": "dog bark"},
        {"id": "a2", "audio": "audio/s1.wav", "qa_type": "A", "family": "event semantics", "kind": "verification",
         "question": "Is there a dog bark?", "answer": "yes"},
        {"id": "a3", "audio": "audio/s2.wav", "qa_type": "A", "family": "spatial location", "kind": "answer",
         "question": "What is the azimuth of the sound at the end?", "answer": "back-right"},
        {"id": "a4", "audio": "audio/s2.wav", "qa_type": "A", "family": "event semantics", "kind": "detection",
         "question": "What sound events are present?", "answer": "clapping; speech"},
    ]
    c = [
        {"id": "c1", "audio": "audio/s3.wav", "qa_type": "C", "family": "temporal relation change", "kind": "answer",
         "question": "Does dog bark start closer than clapping and end farther away?", "answer": "no"},
        {"id": "c2", "audio": "audio/s3.wav", "qa_type": "C", "family": "movement-conditioned spatial relation",
         "kind": "answer", "question": "At the middle, is the moving sound higher?", "answer": "no"},
        {"id": "c3", "audio": "audio/s3.wav", "qa_type": "C", "family": "cross-source trajectory relation",
         "kind": "answer", "question": "Does dog bark change distance more than clapping?", "answer": "yes"},
    ]
    for name in ("s1", "s2", "s3"):
        write_channels(folder / "audio" / f"{name}.wav", channels=4, rate=32_000)
    for name, items in (("type_a", a), ("type_c", c)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return {"a": a, "c": c}


def rows_of(task, samples, outputs) -> list[dict]:
    """Result rows as a sweep writes them, for the given replies (None: the sample failed)."""
    rows = []
    for sample, output in zip(samples, outputs):
        parsed = None if output is None else task.parse(output, sample)
        rows.append({
            "model": "m", "task": task.name, "method": "none", "ratio": 0.0, "sample_id": sample.id,
            "item": sample.item, "reference": sample.answer, "meta": sample.meta, "position": sample.position,
            "output": output, "parsed": parsed, **task.score(parsed, sample),
        })
    return rows


# -- AVI-Bench's audio-visual tasks: images, audio and video files written here -----------------------

FRAME_SIZE = (56, 56)  # (height, width): 4 image tokens after the 2 x 2 merge


def write_image(path: Path, seed: int) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = (np.random.default_rng(seed).random((*FRAME_SIZE, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def write_video(path: Path, seconds: float = 4.0, fps: int = 4, sound: bool = True, seed: int = 0) -> Path:
    """An MPEG-4 video of random frames, with a 16 kHz AAC sound track (a tone) unless ``sound`` is False."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with av.open(str(path), "w") as container:
        video = container.add_stream("mpeg4", rate=fps)
        video.height, video.width, video.pix_fmt = *FRAME_SIZE, "yuv420p"
        audio = container.add_stream("aac", rate=SAMPLE_RATE) if sound else None
        if audio is not None:
            audio.layout = "mono"
        for _ in range(int(seconds * fps)):
            frame = av.VideoFrame.from_ndarray((rng.random((*FRAME_SIZE, 3)) * 255).astype(np.uint8), format="rgb24")
            container.mux(video.encode(frame))
        container.mux(video.encode())
        if audio is not None:
            t = np.arange(int(SAMPLE_RATE * seconds)) / SAMPLE_RATE
            samples = av.AudioFrame.from_ndarray((0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)[None], format="fltp",
                                                 layout="mono")
            samples.sample_rate = SAMPLE_RATE
            container.mux(audio.encode(samples))
            container.mux(audio.encode())
    return path


def _avi_media_entry(entry_id, task, prompt, text, options, answer, audio=(), images=(), video=None):
    return {"id": entry_id, "task": task, "subtask": "fixture",
            "input": {"question": {"prompt": prompt, "text": text, "options": options}, "audio_list": list(audio) or None,
                      "image_list": list(images) or None, "video": video},
            "output": {"question_answer": answer}}


def avibench_visual(root: Path) -> dict[str, list[dict]]:
    """``<root>/AVI-Bench/levels/<stage>/<TASK>`` for the twelve audio-visual tasks, two formal entries
    each (VSQA_I, VSQA_V and AVQA with a ``pre_`` check too), their media written here: images,
    4 s videos at 4 fps with a sound track (silent for VSQA_V), audio clips. Returns the entries per task."""
    box = [8, 8, 20, 20]
    frames = [f"./input/f{i}.png" for i in range(10)]
    yes_no = dict(prompt=None, options="options_yes_no")
    tasks = {
        ("sensation", "VSQA_I"): [
            _avi_media_entry("0", "VSQA_I", None, "Is there a face?", "get_yes_no", "yes", images=["./input/0.png"]),
            _avi_media_entry("pre_0", "VSQA_I", None, "Can you see anything?", "options_yes_no", "yes", images=["./input/0.png"]),
            _avi_media_entry("1", "VSQA_I", None, "Where is the ball?", "get_from_3d-task1", "left", images=["./input/1.png"]),
        ],
        ("sensation", "VSQA_V"): [
            _avi_media_entry("0", "VSQA_V", None, "Which shape moves?", "what_shape", "Cube", video="./input/0.mp4"),
            _avi_media_entry("pre_0", "VSQA_V", **yes_no, text="Can you see anything?", answer="yes", video="./input/0.mp4"),
            _avi_media_entry("1", "VSQA_V", None, "How does it move?", "what_movement_2d", "vertical", video="./input/1.mp4"),
        ],
        ("sensation", "AVSQA"): [
            _avi_media_entry("0", "AVSQA", "prompt_avsqa", "Which objects make sound?", "avsqa_options_list_object",
                             "cube;cone", video="./input/0.mp4"),
            _avi_media_entry("1", "AVSQA", "prompt_avsqa", "Which colour sounds?", "avsqa_options_list_color", "red",
                             video="./input/1.mp4"),
        ],
        ("perception", "VMIC"): [
            _avi_media_entry("0", "VMIC", "prompt_vmic", "What is in the image?", "vmic_cls_list", {"banana": 2, "cake": 1},
                             images=["./input/0.png"]),
            _avi_media_entry("1", "VMIC", "prompt_vmic", "What is in the image?", "vmic_cls_list", {"bird": 3},
                             images=["./input/1.png"]),
        ],
        ("perception", "AVL"): [
            _avi_media_entry("0", "AVL", "prompt_avl", "Locate the sounding objects.", "avl_cls_list",
                             {"bbox": {"dog_1": box}, "original_wh": [56, 56]}, audio=["./input/0.wav"], images=["./input/0.png"]),
            _avi_media_entry("1", "AVL", "prompt_avl", "Locate the sounding objects.", "avl_cls_list",
                             {"bbox": {"cat_1": box, "dog_2": [30, 30, 10, 10]}, "original_wh": [56, 56]},
                             audio=["./input/1.wav"], images=["./input/1.png"]),
        ],
        ("perception", "AVM"): [
            _avi_media_entry("0", "AVM", "prompt_avm", "Do the sound and the video match?", "avm_options_list", "yes",
                             video="./input/0.mp4"),
            _avi_media_entry("1", "AVM", "prompt_avm", "Do the sound and the video match?", "avm_options_list", "no",
                             video="./input/1.mp4"),
        ],
        ("understand", "AVR"): [
            _avi_media_entry("0", "AVR", "prompt_avr", "Which images match the sound?", None, [0, 2], audio=["./input/0.wav"],
                             images=["./input/0_00.png", "./input/0_01.png", "./input/0_02.png"]),
            _avi_media_entry("1", "AVR", "prompt_avr", "Which images match the sound?", None, [1], audio=["./input/1.wav"],
                             images=["./input/0_00.png", "./input/0_01.png"]),
        ],
        ("understand", "VAR"): [
            _avi_media_entry("0", "VAR", "prompt_var", "Which sounds match the image?", None, [1],
                             audio=["./input/0_00.wav", "./input/0_01.wav"], images=["./input/0.png"]),
            _avi_media_entry("1", "VAR", "prompt_var", "Which sounds match the image?", None, [0],
                             audio=["./input/0_00.wav", "./input/0_01.wav"], images=["./input/1.png"]),
        ],
        ("understand", "AVC"): [
            _avi_media_entry("0", "AVC", None, "Describe the video and its sound.", None, ["a dog barks in a park"],
                             video="./input/0.mp4"),
            _avi_media_entry("1", "AVC", None, "Describe the video and its sound.", None, ["a man plays the piano"],
                             video="./input/1.mp4"),
        ],
        ("reasoning", "AVH"): [
            _avi_media_entry("0", "AVH", "prompt_avh", "Is the dog visible?", "avh_options_list", "no", video="./input/0.mp4"),
            _avi_media_entry("1", "AVH", "prompt_avh", "Is the car visible?", "avh_options_list", "yes", video="./input/1.mp4"),
        ],
        ("reasoning", "VAH"): [
            _avi_media_entry("0", "VAH", "prompt_vah", "Is the dog heard?", "vah_options_list", "yes", video="./input/0.mp4"),
            _avi_media_entry("1", "VAH", "prompt_vah", "Is the car heard?", "vah_options_list", "no", video="./input/1.mp4"),
        ],
        ("reasoning", "AVQA"): [
            _avi_media_entry("0", "AVQA", "prompt_avqa", "Is there a voiceover?", "avqa_options_list_is", "yes",
                             video="./input/0.mp4"),
            _avi_media_entry("pre_0", "AVQA", "prompt_avqa", "Can you hear anything?", "avqa_options_list_is", "yes",
                             video="./input/0.mp4"),
            _avi_media_entry("1", "AVQA", "prompt_avqa", "How many instruments sound?", None, "2", video="./input/1.mp4"),
        ],
        ("reasoning", "AVLG"): [
            _avi_media_entry("0", "AVLG", "prompt_avlg", "Where is the sounding object in each frame?", None,
                             {"bbox": {f"frame_{i}": box if i % 3 else None for i in range(10)}, "original_wh": [56, 56]},
                             audio=["./input/0.wav"], images=frames),
            _avi_media_entry("1", "AVLG", "prompt_avlg", "Where is the sounding object in each frame?", None,
                             {"bbox": {f"frame_{i}": box for i in range(10)}, "original_wh": [56, 56]},
                             audio=["./input/1.wav"], images=frames),
        ],
    }
    for (stage, task), entries in tasks.items():
        folder = root / "AVI-Bench" / "levels" / stage / task
        media = {p for e in entries for p in [*(e["input"]["audio_list"] or []), *(e["input"]["image_list"] or []),
                                              *([e["input"]["video"]] if e["input"]["video"] else [])]}
        for seed, name in enumerate(sorted(media)):
            path = folder / name.removeprefix("./")
            if name.endswith(".png"):
                write_image(path, seed)
            elif name.endswith(".mp4"):
                write_video(path, sound=task != "VSQA_V", seed=seed)
            else:
                write_channels(path)
        write_json(folder / "data.json", entries)
    return {task: entries for (_, task), entries in tasks.items()}
