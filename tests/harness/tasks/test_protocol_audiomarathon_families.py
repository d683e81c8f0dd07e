"""The audiomarathon protocol per model family: each AudioMarathon task, resolved for Phi-4-MM, Aero-1
and Voxtral, asks what that model's script asks (the user text, no system turn, the audio first),
reads the audio as the script does, and is a task of its own name, with the family in its config.
Expected prompts are built from the fixture's raw metadata by a transcription of each script's
prompt code (DabDans/AudioMarathon at c8f49f3, paths below), sharing nothing with kvprune's templates."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import yaml

from kvprune.harness.audio import load_clips
from kvprune.harness.sweep.identity import digest
from kvprune.harness.tasks.benchmark import builtin_configs
from kvprune.harness.tasks.config_files import TaskConfigError
from kvprune.harness.tasks.prompts import ClipRef
from kvprune.harness.tasks.protocols import identity_config
from kvprune.harness.tasks.task import get_task, task_from_config
from tests.support import task_fixtures

AGE = ("Listen to this audio and identify the speaker's age group. Choose the most appropriate option: (a) Young Adult "
       "(18-30), (b) Early Career (31-40), (c) Mid Career (41-50), (d) Senior (51-70), (e) Elderly (71+). Answer with only "
       "the letter (a, b, c, d, or e).")
GENDER = ("Listen to this audio and identify the speaker's gender. Is this a male or female voice? If it is a male, answer "
          "'a'. If it is a female, answer 'b'. Answer with only 'a' or 'b'.")
HAD = ("Listen to this audio clip carefully. Is this audio completely authentic (real) or does it contain any artificially "
       "synthesized segments (fake)? If it is completely real, answer 'a'. If it contains any fake segments, answer 'b'. "
       "Answer with only 'a' or 'b'.")
PICK = "Please listen to the audio and select the correct answer. Reply with only the letter (A, B, C, or D)."
GTZAN = "Listen to this audio segment and identify the music genre based on what you hear."
RACE = ("Listen to this audio of a passage being read aloud, then answer the multiple-choice question based solely on the "
        "information from the audio.")
FORMAT = "Respond with only the letter of the correct option (A, B, C, or D)."
TAU = "Listen to this audio and identify the acoustic scene. Choose the most appropriate option."
TAU_FORMAT = "Respond with only the letter of your answer (A, B, C, or D)."


def lines(options, form="{letter}. {text}", letters="ABCDE"):
    return "".join(form.format(letter=letter, text=text) + "\n" for letter, text in zip(letters, options))


def qa(item, form="{letter}. {text}", tail=PICK):
    """create_qa_prompt of Phi-4's DART DESED/SLUE, Aero-1's SLUE and Voxtral's DESED/SLUE scripts."""
    return f"{item['question']}\n\n{lines(item['options'], form).strip()}\n\n{tail}"


def question_options(item, instruction):
    """create_gtzan_prompt / create_race_prompt (Phi-4, Aero-1 and Voxtral alike)."""
    return f"{instruction}\n\nQuestion: {item['question']}\n\nOptions:\n{lines(item['options']).strip()}\n\n{FORMAT}"


def tau(item, gap):
    """Phi-4's TAU_test.py and Voxtral's create_tau_prompt (gap "\\n"), Aero-1's TAU_test_aero.py (gap "\\n\\n")."""
    options = "".join(f"{letter}: {text}\n" for letter, text in zip("ABCD", item["options"])).strip()
    return f"{TAU}{gap}{options}{gap}{TAU_FORMAT}"


EXPECTED = {  # (task, family) -> the script's user text for a raw item
    ("desed", "phi4_multimodal"): qa,  # src/Phi4MM/DART/DESED_dart.py (Others/DESED_test.py's is undefined)
    ("slue", "phi4_multimodal"): qa,  # src/Phi4MM/DART/SLUE_dart.py
    ("gtzan", "phi4_multimodal"): lambda item: question_options(item, GTZAN),  # src/Phi4MM/Others/gtzan_test.py
    ("race", "phi4_multimodal"): lambda item: question_options(item, RACE),  # src/Phi4MM/Others/race_test.py
    ("tau", "phi4_multimodal"): lambda item: tau(item, "\n"),  # src/Phi4MM/Others/TAU_test.py
    ("vesus", "phi4_multimodal"): lambda item: qa(item, "{letter}) {text}", "Please select the correct answer (A, B, C, or D)."),
    ("had", "phi4_multimodal"): lambda item: HAD,  # src/Phi4MM/Others/HAD_test.py
    ("vox_age", "phi4_multimodal"): lambda item: AGE,  # src/Phi4MM/Others/Vox_age_test.py
    ("vox_gender", "phi4_multimodal"): lambda item: GENDER,  # src/Phi4MM/Others/Vox_test.py
    ("desed", "aero"): lambda item: f"Listen to the audio carefully and answer the following question.\n\n"
                                    f"{qa(item, tail='Please select the correct answer and respond with only the letter (A, B, C, or D).')}",
    ("slue", "aero"): qa,  # src/Aero-1/Others/SLUE_test_aero.py
    ("gtzan", "aero"): lambda item: question_options(item, GTZAN),
    ("race", "aero"): lambda item: question_options(item, RACE),
    ("tau", "aero"): lambda item: tau(item, "\n\n"),
    ("vesus", "aero"): lambda item: qa(item, "{letter}) {text}", "Please select the correct answer (A, B, C, or D)."),
    ("had", "aero"): lambda item: "Is this audio real or fake? Answer with 'real' or 'fake' only.",
    ("vox_age", "aero"): lambda item: AGE,
    ("vox_gender", "aero"): lambda item: GENDER,
    ("librispeech", "aero"): lambda item: ("Transcribe this audio accurately. Remove hesitation words like 'um', 'uh'. "
                                           "Provide only the transcribed text without any additional comments."),
    ("desed", "voxtral"): qa,  # src/Voxtral/eval_DESED.py
    ("slue", "voxtral"): qa,  # src/Voxtral/eval_SLUE.py
    ("gtzan", "voxtral"): lambda item: qa(item, tail="Please listen to the audio and identify the music genre. Reply with "
                                                      "only the letter (A, B, C, or D)."),  # eval_GTZAN.py
    ("race", "voxtral"): lambda item: question_options(item, RACE),  # eval_RACE.py
    ("tau", "voxtral"): lambda item: tau(item, "\n"),  # eval_TAU.py
    ("vesus", "voxtral"): lambda item: f"{item['question']}\n\n{lines(item['options'])}\n{PICK}",  # eval_VESUS.py
    ("had", "voxtral"): lambda item: f"{HAD}\n\na. real\nb. fake\n\nPlease listen to the audio and select the correct "
                                     "answer. Reply with only the letter (a or b).",  # eval_HAD.py
    ("vox_age", "voxtral"): lambda item: f"{item['question']}\n\n{lines(item['options'], letters='abcde').strip()}\n\n"
                                         "Please listen to the audio and select the correct answer. Reply with only the "
                                         "letter (a, b, c, d, or e).",  # eval_Vox_Age.py
}
RAW = {  # task -> (metadata file under the task folder, how an item names its audio, its options)
    "desed": ("DESED/desed_sound_event_detection_task.json", "path", lambda i: [i["choices"][x] for x in "ABCD"]),
    "slue": ("SLUE/merged_audio_data.json", "path", lambda i: [i[f"choice_{x}"] for x in "abcd"]),
    "gtzan": ("GTZAN/music_genre_classification_meta.json", "path", lambda i: [i[f"choice_{x}"] for x in "abcd"]),
    "race": ("RACE/race_benchmark.json", "audio_path", lambda i: i["options"]),
    "tau": ("TAU/acoustic_scene_task_meta.json", "path", lambda i: [i[f"choice_{x}"] for x in "abcd"]),
    "vesus": ("VESUS/audio_emotion_dataset.json", "path", lambda i: [i[f"choice_{x}"] for x in "abcd"]),
    "vox_age": ("VoxCeleb/age_classification_task_meta.json", "path", lambda i: [i[f"choice_{x}"] for x in "abcde"]),
    "vox_gender": ("VoxCeleb/gender_id_task_meta.json", "path", lambda i: [i["choice_a"], i["choice_b"]]),
}


def raw_items(root, task: str) -> dict[tuple[str, str], dict]:
    """The fixture's items as the scripts read them, by audio file name and question (HAD and
    LibriSpeech: by file)."""
    if task not in RAW:
        return {(path.name, ""): {} for path in root.rglob("*") if path.suffix in (".wav", ".flac")}
    file, key, options = RAW[task]
    data = json.loads((root / file).read_text())
    items = data["tasks"] if isinstance(data, dict) else data
    return {(item[key].split("/")[-1], item["question"]): {**item, "options": options(item)} for item in items}


@pytest.mark.parametrize(("task", "family"), sorted(EXPECTED))
def test_each_family_asks_what_its_script_asks(task, family, tmp_path):
    task_fixtures.WRITERS[task](tmp_path)
    resolved = get_task(task).under("audiomarathon", family)
    assert (resolved.name, resolved.config["family"]) == (f"{task}@audiomarathon:{family}", family)
    items = raw_items(tmp_path, task)
    samples = resolved.load(tmp_path)
    assert samples
    for sample in samples:
        rendered = resolved.render(sample)
        assert rendered.system is None  # no script of these models has a system turn
        clip, text = rendered.segments  # the audio first, then the text, as <|audio_1|>{text} and [audio, text]
        assert isinstance(clip, ClipRef)
        assert text == EXPECTED[task, family](items[clip.path.name, sample.question])


def test_voxtral_transcribes_librispeech_with_its_transcription_request(tmp_path):
    """src/Voxtral/eval_LibriSpeech.py calls apply_transcription_request(language="en"), not a chat turn."""
    task_fixtures.librispeech(tmp_path)
    resolved = get_task("librispeech").under("audiomarathon", "voxtral")
    rendered = resolved.render(resolved.load(tmp_path)[0])
    assert (rendered.transcription, rendered.system, [type(s) for s in rendered.segments]) == ("en", None, [ClipRef])
    assert json.loads(rendered.text)["transcription"] == "en"  # the request is part of the input hash
    assert (resolved.max_new_tokens, resolved.parser) == (1000, "audiomarathon_voxtral_asr")


@pytest.mark.parametrize("task", ["gtzan", "librispeech", "desed"])
def test_the_scripts_own_model_runs_the_protocols_conventions_under_the_plain_name(task):
    """Qwen2.5-Omni, whose scripts the protocol's conventions are (the other families without a script
    of their own: tests/harness/tasks/test_family_conventions.py)."""
    resolved = get_task(task).under("audiomarathon", "qwen2_5_omni")
    assert resolved.name == f"{task}@audiomarathon" and "family" not in resolved.config
    assert resolved.config == get_task(task).under("audiomarathon").config


def stereo(path, left, right):
    sf.write(path, np.stack([left, right], axis=1), task_fixtures.SAMPLE_RATE, subtype="FLOAT")
    return path


def test_audio_as_each_script_reads_it(tmp_path):
    """Phi-4's GTZAN and RACE scripts keep the first channel (audio_np[:, 0]); its DESED, HAD, SLUE,
    TAU and VoxCeleb scripts average the channels and divide by the peak (prepare_audio_for_processor);
    Aero-1's (librosa.load, mono) average them; files here are at 16 kHz, so nothing is resampled."""
    t = np.arange(1600) / task_fixtures.SAMPLE_RATE
    left, right = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), (0.05 * np.cos(2 * np.pi * 300 * t)).astype(np.float32)
    path = stereo(tmp_path / "clip.wav", left, right)
    [first] = load_clips(path, get_task("gtzan").under("audiomarathon", "phi4_multimodal").channels)
    np.testing.assert_array_equal(first, left)
    mean = (left.astype(np.float64) + right) / 2
    [peak] = load_clips(path, get_task("desed").under("audiomarathon", "phi4_multimodal").channels)
    np.testing.assert_allclose(peak, mean / np.abs(mean).max(), rtol=1e-6)
    assert np.abs(peak).max() == pytest.approx(1.0)
    [aero] = load_clips(path, get_task("desed").under("audiomarathon", "aero").channels)
    np.testing.assert_allclose(aero, mean, rtol=1e-6)


def test_family_layers_are_checked_and_null_restores_the_tasks_own_field():
    config = dict(get_task("race").config)
    restored = get_task("race").under("audiomarathon", "phi4_multimodal")  # prompt: null in its layer
    assert restored.config["prompt"] == config["prompt"] and "system" not in restored.config
    for layer, problem in [({"cobol": {}}, "unknown model family 'cobol'"), ({"aero": {"name": "x"}}, "cannot be changed per family"),
                           ({"aero": "x"}, "expected the task fields it changes")]:
        bad = {**config, "protocols": {"audiomarathon": {**config["protocols"]["audiomarathon"], "families": layer}}}
        with pytest.raises(TaskConfigError, match=problem):
            task_from_config(bad, source="test")


def test_a_runs_identity_leaves_out_the_family_layers():
    """Folders written before the families existed keep their settings ids: the identity of a task's
    config is the config read from its file with the families block cut out (here, as text)."""
    for name in ("gtzan", "librispeech", "vesus"):
        text = builtin_configs()[name].read_text()
        before = yaml.safe_load(text[:text.index("    families:")])
        assert digest(identity_config(get_task(name).config)) == digest({**before, "name": name})
        resolved = get_task(name).under("audiomarathon", "aero").config  # no protocols left: its identity is itself
        assert identity_config(resolved) == resolved


def test_only_phi4s_vesus_loader_drops_the_happy_clips_of_speakers_2_and_10(tmp_path):
    """src/Phi4MM/Others/VESUS_test.py skips them, as the Qwen script does; Aero-1's and Voxtral's
    loaders keep every item."""
    task_fixtures.vesus(tmp_path)
    counts = {family: len(get_task("vesus").under("audiomarathon", family).load(tmp_path))
              for family in ("phi4_multimodal", "aero", "voxtral")}
    assert counts == {"phi4_multimodal": 2, "aero": 3, "voxtral": 3}
