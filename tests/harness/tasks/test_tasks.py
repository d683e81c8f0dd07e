"""The task layer: the ten AudioMarathon tasks load their native layouts, render AudioMarathon's
prompts, score and summarize; every data and config error says what is wrong and where."""

from __future__ import annotations

import json
import textwrap

import pytest
import soundfile as sf
import yaml

from kvprune.harness.demo.synthetic import format_prompt, make_item
from kvprune.harness.tasks.benchmark import builtin_configs
from kvprune.harness.tasks.prompts import ClipRef
from kvprune.harness.tasks.task import Sample, TaskConfigError, TaskDataError, get_task, list_tasks, load_task_file
from tests.support import task_fixtures

ABBREVIATIONS = {
    "librispeech": "ASR", "race": "SCR", "slue": "SER", "tau": "ASC", "gtzan": "MC",
    "desed": "SED", "vesus": "ER", "had": "SD", "vox_age": "SAR", "vox_gender": "SGR",
}


def test_the_ten_audiomarathon_tasks_are_registered():
    audiomarathon = [name for name in list_tasks() if get_task(name).benchmark == "AudioMarathon"]
    assert audiomarathon == sorted(ABBREVIATIONS)
    for name, abbreviation in ABBREVIATIONS.items():
        task = get_task(name)
        assert (task.name, task.abbreviation) == (name, abbreviation)
        assert task.primary_metric == task.metrics[0]


# -- loading native layouts -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ABBREVIATIONS))
def test_load_reads_the_native_layout(name, tmp_path):
    expected = task_fixtures.WRITERS[name](tmp_path)
    samples = get_task(name).load(tmp_path)
    assert [(s.id, s.answer) for s in samples] == expected
    for sample in samples:
        assert sample.item == sample.id
        assert all(sf.info(path).frames > 0 for path in sample.audio)


def test_samples_carry_choices_and_metadata(tmp_path):
    task_fixtures.race(tmp_path)
    first = get_task("race").load(tmp_path)[0]
    assert first.question == "Why did Tom leave?"
    assert first.choices == ("rain", "work", "fear", "love")
    assert first.audio == (tmp_path / "RACE" / "high" / "h1.wav",)
    assert first.meta == {"article_id": "h1"}

    task_fixtures.had(tmp_path)
    fake = get_task("had").load(tmp_path)[-1]
    assert (fake.choices, fake.answer, fake.meta) == (("real", "fake"), "B", {"label": "fake"})


def test_gtzan_also_finds_audio_beside_the_metadata(tmp_path):
    """Phi-4's GTZAN script reads audio next to the metadata instead of under wav/."""
    expected = task_fixtures.gtzan(tmp_path)
    for genre in (tmp_path / "GTZAN" / "wav").iterdir():
        genre.rename(tmp_path / "GTZAN" / genre.name)
    samples = get_task("gtzan").load(tmp_path)
    assert [(s.id, s.answer) for s in samples] == expected
    assert samples[0].audio == (tmp_path / "GTZAN" / "blues" / "blues.00001.wav",)


def test_limit_keeps_a_fixed_nested_subset_in_dataset_order(tmp_path):
    task_fixtures.had(tmp_path, real=6, fake=6)
    task = get_task("had")
    everything = [s.id for s in task.load(tmp_path)]
    four, eight = ([s.id for s in task.load(tmp_path, limit=n)] for n in (4, 8))
    assert len(four) == 4 and four == [s.id for s in task.load(tmp_path, limit=4)]
    assert set(four) < set(eight)
    assert four == [i for i in everything if i in four]
    assert [s.id for s in task.load(tmp_path, limit=100)] == everything
    with pytest.raises(ValueError, match="limit"):
        task.load(tmp_path, limit=0)


# -- prompts ----------------------------------------------------------------------------------------


def test_race_prompt_follows_audiomarathon(tmp_path):
    task_fixtures.race(tmp_path)
    task = get_task("race")
    prompt = task.render(task.load(tmp_path)[0]).text
    assert prompt.startswith("Listen to this audio of a passage being read aloud")
    assert "\n\nQuestion: Why did Tom leave?\n\nOptions:\nA. rain\nB. work\nC. fear\nD. love\n\n" in prompt
    assert prompt.endswith("Respond with only the letter of the correct option (A, B, C, or D).")


@pytest.mark.parametrize(
    "name, option_line", [("tau", "A: "), ("vesus", "A) "), ("vox_age", "E) Elderly (71+)"), ("slue", "A. ")]
)
def test_option_lines_use_each_task_format(name, option_line, tmp_path):
    task_fixtures.WRITERS[name](tmp_path)
    task = get_task(name)
    lines = task.render(task.load(tmp_path)[0]).text.splitlines()
    assert any(line.startswith(option_line) for line in lines)


@pytest.mark.parametrize("name", sorted(ABBREVIATIONS))
def test_every_prompt_renders_its_sample(name, tmp_path):
    task_fixtures.WRITERS[name](tmp_path)
    task = get_task(name)
    for sample in task.load(tmp_path):
        prompt = task.render(sample).text
        assert "{" not in prompt and "}" not in prompt
        if "{options}" in task.config["prompt"]:
            assert all(text in prompt for text in sample.choices)


def test_binary_prompts_fix_the_letters_like_audiomarathon(tmp_path):
    assert get_task("had").render(Sample("x", (), "", ("real", "fake"), "A")).text.endswith(
        "If it is completely real, answer 'a'. If it contains any fake segments, answer 'b'. "
        "Answer with only 'a' or 'b'."
    )
    assert "If it is a male, answer 'a'. If it is a female, answer 'b'." in get_task("vox_gender").render(
        Sample("x", (), "", ("Male", "Female"), "A")
    ).text


def test_asr_prompt_asks_for_spoken_content():
    assert get_task("librispeech").render(Sample("u", (), "", (), "TEXT")).text.endswith(
        "Your response should be formatted as follows: Spoken Content: <transcribed text here>"
    )


# -- parse, score, summarize ------------------------------------------------------------------------


def test_multiple_choice_round_trip(tmp_path):
    """Six TAU answers; worked out by hand: 4 right of 6 -> accuracy 66.67."""
    task_fixtures.tau(tmp_path)
    task = get_task("tau")
    samples = task.load(tmp_path) * 2  # golds: A, B, C, A, B, C
    outputs = ["A", "(B)", "I think it is D", "Both A and C", "b.", "The answer is C"]
    rows = []
    for sample, output in zip(samples, outputs):
        parsed = task.parse(output, sample)
        rows.append({"parsed": parsed, "reference": sample.answer, "item": sample.item, **task.score(parsed, sample)})
    assert [r["parsed"] for r in rows] == ["A", "B", "D", None, "B", "C"]
    assert [r["correct"] for r in rows] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    summary = task.summarize(rows)
    assert list(summary) == ["f1_macro", "accuracy", "f1_weighted"]
    assert summary["accuracy"] == pytest.approx(400 / 6)
    # A: tp 1, predicted 1, gold 2 -> 2/3; B: tp 2, 2, 2 -> 1; C: tp 1, 1, 2 -> 2/3; D: tp 0 -> 0.
    assert summary["f1_macro"] == pytest.approx(100 * (2 / 3 + 1 + 2 / 3 + 0) / 4)
    assert summary["f1_weighted"] == pytest.approx(100 * (2 * 2 / 3 + 2 * 1 + 2 * 2 / 3) / 6)


def test_asr_round_trip(tmp_path):
    task_fixtures.librispeech(tmp_path)
    task = get_task("librispeech")
    samples = task.load(tmp_path)
    outputs = [
        'Spoken Content: "He hoped there would be stew for dinner."',  # 0 errors / 8 words
        "Spoken Content: stuff it into you his belly counselled",  # 1 deletion / 8 words
        "I cannot transcribe this.",  # 10 errors (4 substitutions + 6 deletions) / 10 words
    ]
    rows = []
    for sample, output in zip(samples, outputs):
        parsed = task.parse(output, sample)
        rows.append({"parsed": parsed, "reference": sample.answer, "item": sample.item, **task.score(parsed, sample)})
    assert rows[0]["parsed"] == "He hoped there would be stew for dinner."
    assert [r["errors"] for r in rows] == [0, 1, 10]
    summary = task.summarize(rows)
    assert list(summary) == ["word_accuracy", "wer"]
    assert summary["wer"] == pytest.approx(100 * 11 / 26)
    assert summary["word_accuracy"] == pytest.approx(100 - (0 + 12.5 + 100) / 3)


def test_unparsed_answers_score_as_wrong():
    task = get_task("had")
    sample = Sample("real/x.wav", (), "", ("real", "fake"), "A")
    assert task.score(None, sample)["correct"] == 0.0
    assert get_task("librispeech").score(None, Sample("u", (), "", (), "ONE TWO"))["wer"] == 100.0
    with pytest.raises(ValueError, match="no results"):
        task.summarize([])


def test_grade_parses_and_scores_one_output_and_keeps_a_failing_parser_as_that_samples_error():
    """What a sweep records for one output: the parsed answer and the scores; no output (a failed run)
    scores as no answer; a parser that raises on an output is that sample's error, scored as no answer."""
    from dataclasses import replace

    from kvprune.harness.tasks.parsers import PARSERS

    task = get_task("had")
    sample = Sample("real/x.wav", (), "", ("real", "fake"), "A")
    right, missing = task.grade("(A)", sample), task.grade(None, sample)
    assert (right.parsed, right.scores["correct"], right.error) == ("A", 1.0, None)
    assert (missing.parsed, missing.scores["correct"], missing.error) == (None, 0.0, None)

    def broken(output, choices):
        raise RuntimeError(f"cannot read {output!r}")

    PARSERS.register("broken_for_test", broken)
    try:
        failed = replace(task, parser="broken_for_test").grade("A", sample)
    finally:
        PARSERS.unregister("broken_for_test")
    assert failed.parsed is None and failed.scores["correct"] == 0.0
    assert isinstance(failed.error, RuntimeError) and str(failed.error) == "cannot read 'A'"


def test_variants_and_multi_clip_segments_from_a_user_yaml(tmp_path):
    """A STAR-Bench-like user task: two labelled clips per item, one run per left rotation (ids <id>@<r>),
    the gold letter following its option's text; AA pools runs, ACR asks for every run of an item."""
    data = tmp_path / "Toy"
    for clip in ("i1a.wav", "i1b.wav", "i2a.wav", "i2b.wav"):
        task_fixtures.write_audio(data / "clips" / clip)
    task_fixtures.write_json(data / "meta.json", [
        {"id": "i1", "audio_paths": ["clips/i1a.wav", "clips/i1b.wav"], "question": "Which is louder?",
         "options": ["the first clip", "the second clip", "equally loud"], "answer": "the second clip"},
        {"id": "i2", "audio_paths": ["clips/i2a.wav", "clips/i2b.wav"], "question": "Which is longer?",
         "options": ["the first clip", "the second clip", "equally long"], "answer": "equally long"},
    ])
    path = tmp_path / "toy.yaml"
    path.write_text(textwrap.dedent("""\
        name: toy
        title: Toy multi-clip comparison
        abbreviation: TOY
        data_dir: Toy
        layout: json_items
        layout_options:
          metadata: meta.json
          audio_field: audio_paths
          choices_field: options
          answer_field: answer
          id_field: id
        prompt:
          - {audio: clips, label: "Clip {i}:"}
          - {text: "{question}\\n{options}\\nAnswer with the letter."}
        option_format: "<{letter}>: {text}"
        parser: multiple_choice
        metrics: [aa, acr, accuracy]
        max_new_tokens: 16
        variants: {name: rotate_options, direction: left}
        """))
    task = load_task_file(path)
    samples = task.load(tmp_path)
    assert [s.id for s in samples] == ["i1@0", "i1@1", "i1@2", "i2@0", "i2@1", "i2@2"]
    assert [s.item for s in samples] == ["i1"] * 3 + ["i2"] * 3
    assert [s.position for s in samples] == list(range(6))
    assert samples[1].choices == ("the second clip", "equally loud", "the first clip")
    assert samples[1].audio == (data / "clips" / "i1a.wav", data / "clips" / "i1b.wav")
    assert [s.choices["ABC".index(s.answer)] for s in samples] == ["the second clip"] * 3 + ["equally long"] * 3
    assert [s.meta["run"] for s in samples] == [0, 1, 2] * 2 and {s.meta["runs"] for s in samples} == {3}
    rendered = task.render(samples[1])
    clip_a, clip_b = (ClipRef(data / "clips" / name) for name in ("i1a.wav", "i1b.wav"))
    assert rendered.segments == (
        "Clip 1:", clip_a, "Clip 2:", clip_b,
        "Which is louder?\n<A>: the second clip\n<B>: equally loud\n<C>: the first clip\nAnswer with the letter.",
    )

    # Item i1 is always answered right; i2 always with letter A (a letter-biased model).
    outputs = ["It is the second clip."] * 3 + ["A"] * 3
    rows = []
    for sample, output in zip(samples, outputs):
        parsed = task.parse(output, sample)
        rows.append({"parsed": parsed, "reference": sample.answer, "item": sample.item, **task.score(parsed, sample)})
    # i2's answer "equally long" is option A in rotation 2 only (left rotation by 2: [long, first, second]).
    assert [r["correct"] for r in rows] == [1, 1, 1, 0, 0, 1]
    summary = task.summarize(rows)
    assert summary == pytest.approx({"aa": 100 * 4 / 6, "acr": 50.0, "accuracy": 100 * 4 / 6})
    assert task.load(tmp_path, limit=1)[0].item in {"i1", "i2"} and len(task.load(tmp_path, limit=1)) == 3


# -- data errors ------------------------------------------------------------------------------------


def test_missing_data_folder_names_the_expected_layout(tmp_path):
    with pytest.raises(TaskDataError) as error:
        get_task("tau").load(tmp_path)
    message = str(error.value)
    assert f"data folder {tmp_path / 'TAU'} not found" in message
    assert "Expected layout: <data_root>/TAU/acoustic_scene_task_meta.json" in message
    assert "choice_a..choice_d, answer_gt" in message and "audio paths relative to <data_root>/TAU" in message


def test_missing_metadata_file(tmp_path):
    (tmp_path / "TAU").mkdir()
    with pytest.raises(TaskDataError, match=r"acoustic_scene_task_meta\.json not found\. Expected layout"):
        get_task("tau").load(tmp_path)


def test_missing_audio_names_the_sample(tmp_path):
    task_fixtures.tau(tmp_path)
    (tmp_path / "TAU" / "park" / "p0.wav").unlink()
    with pytest.raises(TaskDataError, match=r"item 1 \(sample park/p0\.wav\): audio file not found: .*park/p0\.wav"):
        get_task("tau").load(tmp_path)


def test_missing_field_names_the_field_and_the_item(tmp_path):
    task_fixtures.tau(tmp_path)
    meta = tmp_path / "TAU" / "acoustic_scene_task_meta.json"
    items = json.loads(meta.read_text())
    del items[2]["choice_c"]
    meta.write_text(json.dumps(items))
    with pytest.raises(TaskDataError, match=r"acoustic_scene_task_meta\.json item 2 \(sample metro/m0\.wav\) has no field 'choice_c'"):
        get_task("tau").load(tmp_path)


def test_gold_that_matches_no_choice_is_rejected(tmp_path):
    task_fixtures.vox_gender(tmp_path)
    meta = tmp_path / "VoxCeleb" / "gender_id_task_meta.json"
    items = json.loads(meta.read_text())
    items[1]["answer_gt"] = "unknown"
    meta.write_text(json.dumps(items))
    problem = r"item 1 \(sample id0004/d\.wav\): answer 'unknown' is neither a letter A-B nor exactly one of the choices"
    with pytest.raises(TaskDataError, match=problem):
        get_task("vox_gender").load(tmp_path)


@pytest.mark.parametrize("content, problem", [
    ("{not json", "is not valid JSON"),
    ('{"tasks": []}', "is not a JSON list"),
    ("[]", "no samples found"),
    ('[{"path": 3}]', "must be an audio path"),
    ("[1]", "item 0 is not a JSON object"),
])
def test_malformed_metadata(tmp_path, content, problem):
    (tmp_path / "TAU").mkdir()
    (tmp_path / "TAU" / "acoustic_scene_task_meta.json").write_text(content)
    with pytest.raises(TaskDataError, match=problem):
        get_task("tau").load(tmp_path)


def test_desed_needs_its_tasks_object(tmp_path):
    task_fixtures.write_json(tmp_path / "DESED" / "desed_sound_event_detection_task.json", [])
    with pytest.raises(TaskDataError, match='not an object with a list under "tasks"'):
        get_task("desed").load(tmp_path)


def test_librispeech_errors(tmp_path):
    task_fixtures.librispeech(tmp_path)
    chapter = tmp_path / "LibriSpeech" / "test-clean" / "1089" / "134686"
    (chapter / "1089-134686-0001.flac").unlink()
    problem = r"1089-134686-0001\.flac, listed in 1089-134686\.trans\.txt, not found.*<utterance>\.flac"
    with pytest.raises(TaskDataError, match=problem):
        get_task("librispeech").load(tmp_path)
    (chapter / "1089-134686.trans.txt").unlink()
    with pytest.raises(TaskDataError, match=r"no transcript for .*1089-134686-0000\.flac"):
        get_task("librispeech").load(tmp_path)
    (tmp_path / "LibriSpeech" / "test-clean").rename(tmp_path / "LibriSpeech" / "dev-clean")
    with pytest.raises(TaskDataError, match=r"split folder .*test-clean not found"):
        get_task("librispeech").load(tmp_path)


def test_had_needs_both_class_folders(tmp_path):
    task_fixtures.write_audio(tmp_path / "HAD" / "real" / "r.wav")
    problem = r"class folder .*HAD/fake not found\. Expected layout: <data_root>/HAD/\{real,fake\}/\*\.wav"
    with pytest.raises(TaskDataError, match=problem):
        get_task("had").load(tmp_path)


def test_unknown_task_lists_the_tasks():
    with pytest.raises(ValueError, match=r"unknown task 'tua'; the tasks are: .*desed, gtzan, had, librispeech"):
        get_task("tua")


# -- config errors ----------------------------------------------------------------------------------

GOOD_YAML = {
    "name": "mini", "title": "Mini", "abbreviation": "MINI", "data_dir": "Mini", "layout": "folder_labels",
    "layout_options": {"folders": ["yes", "no"]}, "prompt": "Yes or no? {letters}", "parser": "multiple_choice",
    "metrics": ["accuracy"], "max_new_tokens": 4,
}


def write_yaml(tmp_path, **changes):
    fields = {**GOOD_YAML, **changes}
    path = tmp_path / "mini.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in fields.items() if v is not ...}))
    return path


def test_a_good_user_yaml_loads(tmp_path):
    task = load_task_file(write_yaml(tmp_path))
    assert (task.name, task.primary_metric) == ("mini", "accuracy")
    assert task.render(Sample("x", (), "", ("yes", "no"), "A")).text == "Yes or no? A or B"
    separated = load_task_file(write_yaml(tmp_path, prompt="{options}?", option_separator=" | "))
    assert separated.render(Sample("x", (), "", ("yes", "no"), "A")).text == "A. yes | B. no?"


@pytest.mark.parametrize("changes, problem", [
    ({"max_new_tokens": ...}, "field 'max_new_tokens': missing"),
    ({"max_new_tokens": "ten"}, "field 'max_new_tokens': expected int"),
    ({"max_new_tokens": 0}, "field 'max_new_tokens': must be at least 1"),
    ({"metrics": []}, "field 'metrics'"),
    ({"metrics": ["f1"]}, "field 'metrics': .* must list metrics from"),
    ({"parser": "regex"}, "field 'parser': unknown 'regex'"),
    ({"layout": "csv"}, "field 'layout': unknown 'csv'"),
    ({"layout_options": {"folder": ["a"]}}, "field 'layout_options': .*folder"),
    ({"layout_options": {"folders": "real"}}, "field 'layout_options': folders must be a list"),
    ({"variants": "shuffle"}, "field 'variants': unknown 'shuffle'"),
    ({"prompt": "Say {answer}"}, r"field 'prompt': names \['answer'\], which the layout does not keep"),
    ({"option_format": "{letter}) {txt}"}, r"field 'option_format': option_format: bad placeholder \['txt'\]"),
    ({"prompt": [{"text": "no audio"}]}, "field 'prompt': the prompt has no audio, image or video segment"),
    ({"prompt": [{"video": "clips"}]}, "field 'prompt': segment 1: video must be 'video'"),
    ({"prompt": [{"video": "video", "frames": 8, "fps": 2}]}, "field 'prompt': segment 1: give frames or fps, not both"),
    ({"prompt": [{"video": "video", "sound": "loud"}]}, "field 'prompt': segment 1: sound must be track"),
    ({"prompt": [{"audio": "clips", "labels": "x"}]}, r"field 'prompt': segment 1: unknown key\(s\) \['labels'\]"),
    ({"prompt": [{"audio": "uncut"}]}, r"field 'prompt': audio segment\(s\) \['uncut'\] name audio the layout does not keep"),
    ({"channels": "foa"}, "field 'channels': unknown channel policy 'foa'"),
    ({"channels": {"policy": "foa_omni"}}, "field 'channels': channel policy foa_omni needs order: acn or fuma"),
    ({"channels": {"policy": "split"}}, "field 'channels': channel policy split needs count"),
    ({"channels": {"policy": "mean", "order": "acn"}}, "field 'channels': channel policy mean takes no order"),
    ({"variants": {"name": "rotate_options", "direction": "up"}}, "field 'variants': direction='up'"),
    ({"metric_options": {"starbench_part": "pc"}}, r"field 'metric_options': no metric of this task takes \['starbench_part'\]"),
    ({"metrics": ["starbench_aa"]}, r"field 'metric_options': metrics \['starbench_aa'\] need \['starbench_part'\]"),
    ({"metrics": ["starbench_aa"], "metric_options": {"starbench_part": "xx"}}, "field 'metric_options': starbench_part='xx' is not one of"),
    ({"breakdown_by": ["difficulty"]}, r"field 'breakdown_by': names \['difficulty'\], which the layout does not keep"),
    ({"protocols": {"lenient": {}}}, "field 'protocols': unknown protocol 'lenient'"),
    ({"data_layout": "mine"}, "field 'data_layout': choose one of"),
    ({"shots": 5}, r"unknown field\(s\) \['shots'\]"),
])
def test_malformed_task_yaml_names_file_and_field(tmp_path, changes, problem):
    path = write_yaml(tmp_path, **changes)
    with pytest.raises(TaskConfigError, match=rf"mini\.yaml: {problem}"):
        load_task_file(path)


def test_yaml_that_does_not_parse(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(TaskConfigError, match=r"broken\.yaml: not valid YAML"):
        load_task_file(path)
    path.write_text("- just\n- a list\n")
    with pytest.raises(TaskConfigError, match=r"broken\.yaml: expected a mapping"):
        load_task_file(path)
    with pytest.raises(TaskConfigError, match="cannot read"):
        load_task_file(tmp_path / "absent.yaml")


# -- include: inheritance ---------------------------------------------------------------------------


def builtin_fields(name: str) -> dict:
    return yaml.safe_load(builtin_configs()[name].read_text())


def test_a_user_file_builds_on_a_builtin_task_and_replaces_keys_whole(tmp_path):
    path = tmp_path / "had_accuracy.yaml"
    own = {"include": "had", "metrics": ["accuracy"], "layout_options": {"folders": ["fake", "real"]}}
    path.write_text(yaml.safe_dump(own))
    task = load_task_file(path)
    expected = {**builtin_fields("had"), "metrics": ["accuracy"], "layout_options": {"folders": ["fake", "real"]}}
    expected["name"] = "had_accuracy"  # the name is the file's own, never inherited
    assert task.config == expected
    assert (task.name, task.primary_metric, task.title) == ("had_accuracy", "accuracy", get_task("had").title)
    task_fixtures.had(tmp_path, real=1, fake=1)
    assert [(s.id, s.answer) for s in task.load(tmp_path)] == [("fake/f0.wav", "A"), ("real/r0.wav", "B")]


def test_includes_resolve_relative_to_each_file_and_nest(tmp_path):
    """mine.yaml includes bases/_voice.yaml, which includes the built-in base _demo by name."""
    (tmp_path / "bases").mkdir()
    (tmp_path / "bases" / "_voice.yaml").write_text("include: _demo\nmax_new_tokens: 6\ntitle: Base title\n")
    (tmp_path / "mine.yaml").write_text("include: [bases/_voice.yaml]\nname: mine\nabbreviation: MINE\ndata_dir: m\n")
    config = load_task_file(tmp_path / "mine.yaml").config
    assert config == {**builtin_fields("_demo"), "max_new_tokens": 6, "title": "Base title", "name": "mine",
                      "abbreviation": "MINE", "data_dir": "m"}


def test_the_demo_tasks_are_a_base_and_four_short_files():
    base = builtin_fields("_demo")
    for name in ("demo_count", "demo_event", "demo_order", "demo_pitch"):
        own = builtin_fields(name)
        assert set(own) == {"include", "title", "abbreviation", "data_dir"}
        assert get_task(name).config == {**base, **{k: v for k, v in own.items() if k != "include"}, "name": name}


def test_the_demo_tasks_render_the_prompt_the_demo_model_was_trained_on():
    item = make_item("count", "test", 0)
    sample = Sample(item.meta["id"], (), item.meta["question"],
                    tuple(item.meta[f"choice_{x}"] for x in "abcd"), item.meta["answer_gt"])
    assert get_task("demo_count").render(sample).text == format_prompt(item.meta)


def test_bases_are_not_tasks():
    assert "_demo" not in list_tasks() and all(not name.startswith("_") for name in list_tasks())
    with pytest.raises(ValueError, match="unknown task '_demo'"):
        get_task("_demo")


def test_an_include_cycle_is_refused_with_its_chain(tmp_path):
    (tmp_path / "a.yaml").write_text("include: b.yaml\n")
    (tmp_path / "b.yaml").write_text("include: [c.yaml]\n")
    (tmp_path / "c.yaml").write_text("include: a.yaml\ntitle: C\n")
    with pytest.raises(TaskConfigError, match=r"c\.yaml: field 'include': include cycle a\.yaml -> b\.yaml -> c\.yaml -> a\.yaml"):
        load_task_file(tmp_path / "a.yaml")
    (tmp_path / "self.yaml").write_text("include: self.yaml\n")
    with pytest.raises(TaskConfigError, match=r"include cycle self\.yaml -> self\.yaml"):
        load_task_file(tmp_path / "self.yaml")


@pytest.mark.parametrize("include, problem", [
    ("gtzann", r"field 'include': no built-in config 'gtzann'; built-in: _avibench, _demo, _mmau"),
    ("absent.yaml", r"absent\.yaml: cannot read the file"),
    ("[3]", r"field 'include': expected a file or a built-in config name"),
])
def test_a_bad_include_names_the_file_and_the_problem(tmp_path, include, problem):
    path = tmp_path / "user.yaml"
    path.write_text(f"include: {include}\n")
    with pytest.raises(TaskConfigError, match=problem):
        load_task_file(path)


def test_get_task_takes_a_yaml_path(tmp_path):
    path = tmp_path / "my_tau.yml"
    path.write_text("include: tau\n")
    assert get_task(str(path)).name == "my_tau"
    with pytest.raises(TaskConfigError, match="cannot read"):
        get_task(str(tmp_path / "absent.yaml"))
