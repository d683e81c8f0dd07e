"""Sweeps that show videos, as a new user runs them: a model whose chat template drops videos is
refused before the first sample; video and audio tokens are counted apart (a press with a visual
scope prunes video tokens, never reported as audio); a video without a sound track on a task that
gives the model each video with its sound is recorded and said; a missing media file is that sample's
error row, which keeps its AVI-Bench entry, so the report (and ``kvprune report``) still score the
others."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from kvprune.harness.cli import main

from tests.harness.sweep.test_avibench_sweep import omni, sweep  # noqa: F401  (the tiny Qwen2.5-Omni fixture)
from tests.support import benchmark_fixtures
from tests.support.tiny_checkpoints import qwen2_audio_checkpoint
from tests.support.results import result_lines


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return benchmark_fixtures.written(tmp_path_factory.mktemp("avibench"), benchmark_fixtures.avibench_asqa,
                                      benchmark_fixtures.avibench_visual)


def test_a_model_whose_template_drops_videos_is_refused_before_the_first_sample(data_root, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(sweep("demo", data_root, out, ["avibench_asqa", "avibench_avqa"], "frame")) == 2
    error = capsys.readouterr().err
    assert ("model demo cannot be shown the videos of task avibench_avqa (1 of 1 samples hold one): its chat template "
            "writes no <|VIDEO|> placeholder for video items") in error
    assert "leave avibench_avqa out of --tasks" in error and not out.exists(), "nothing ran, nothing written"


def test_a_model_that_does_not_see_is_refused_before_the_first_sample(data_root, tmp_path, capsys):
    model = qwen2_audio_checkpoint(tmp_path / "qwen2_audio")
    assert main(sweep(model, data_root, tmp_path / "out", ["avibench_avqa"], "frame")) == 2
    assert "cannot be shown the videos of task avibench_avqa (1 of 1 samples hold one): Qwen2-Audio takes no videos" in (
        capsys.readouterr().err)


def test_video_tokens_are_counted_apart_from_audio_tokens(omni, data_root, tmp_path):
    out = tmp_path / "out"
    assert main(sweep(omni, data_root, out, ["avibench_avqa"], "fastv:scope=video,fastv")) == 0
    rows = [r for r in result_lines(out) if r.get("pass") is None]
    by_method = {r["method_id"]: r for r in rows}
    unpruned = by_method["none"]
    assert unpruned["video_tokens"] > 0 and unpruned["audio_tokens"] > 0
    assert (unpruned["kept_tokens"], unpruned["kept_video_tokens"]) == (unpruned["audio_tokens"], unpruned["video_tokens"])
    visual = [r for r in rows if r["method"] != "none" and r["kept_video_tokens"] < r["video_tokens"]]
    audio = [r for r in rows if r["method"] != "none" and r["kept_tokens"] < r["audio_tokens"]]
    assert len(visual) == len(audio) == 1 and visual[0]["method_id"] != audio[0]["method_id"]
    assert visual[0]["kept_tokens"] == visual[0]["audio_tokens"], "scope=video keeps every audio token"
    assert audio[0]["kept_video_tokens"] == audio[0]["video_tokens"], "scope=audio keeps every video token"
    summary = pd.read_csv(out / "summary.csv").set_index("method")
    report = (out / "report.md").read_text()
    assert "| audio tokens kept (mean) | video tokens kept (mean; frames and images) |" in report
    for label, row in summary.iterrows():
        assert row["kept_tokens"] <= row["audio_tokens"] and row["kept_video_tokens"] <= row["video_tokens"], label


def test_a_video_without_its_sound_track_is_recorded_and_said(omni, data_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(data_root, root)
    folder = root / "AVI-Bench" / "levels" / "reasoning" / "AVQA" / "input"
    benchmark_fixtures.write_video(folder / "0.mp4", sound=False)  # its entries (0 and pre_0) now show a silent video
    out = tmp_path / "out"
    assert main(sweep(omni, root, out, ["avibench_avqa"], "frame", "--limit", "3")) == 0
    rows = [r for r in result_lines(out) if r.get("pass") is None]
    silent = {r["sample_id"]: r["silent_videos"] for r in rows}
    assert silent == {"0": 1, "pre_0": 1, "1": 0}
    assert all(r["audio_tokens"] == 0 for r in rows if r["sample_id"] != "1")
    report = (out / "report.md").read_text()
    assert "> **Videos without a sound track: 2 sample(s) showed a video whose file has none**" in report
    assert "> - avibench_avqa: 2 of 3 sample(s) with a video" in report


def test_a_missing_media_file_is_an_error_row_and_the_report_still_scores(omni, data_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(data_root, root)
    (root / "AVI-Bench" / "levels" / "reasoning" / "AVQA" / "input" / "1.mp4").unlink()
    (root / "AVI-Bench" / "levels" / "sensation" / "ASQA" / "input" / "00001.wav").unlink()
    out = tmp_path / "out"
    assert main(sweep(omni, root, out, ["avibench_avqa", "avibench_asqa"], "frame", "--limit", "5")) == 1
    rows = result_lines(out)
    failed = [r for r in rows if r["error"]]
    assert {(r["task"], r["sample_id"]) for r in failed} == {("avibench_avqa", "1"), ("avibench_asqa", "00001")}
    assert all("file not found" in r["error"] and r["meta"]["entry"]["id"] == r["sample_id"] for r in failed)
    summary = pd.read_csv(out / "summary.csv")
    assert summary["score"].notna().all(), "the other entries are scored; the failed one is left out as no reply"
    assert "> **Warning: 4 of" in (out / "report.md").read_text()

    for row in rows:  # a folder written before failed rows kept their entry: kvprune report still scores it
        if row["error"]:
            row["meta"] = {}
    (out / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["report", str(out)]) == 0
    assert pd.read_csv(out / "summary.csv")["score"].tolist() == summary["score"].tolist()
