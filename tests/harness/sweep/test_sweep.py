"""``kvprune sweep`` end to end on the demo model: results, resume after a kill, outputs, user errors,
method specs with parameters and composition, a press registered by a third party, a user's task
file, and results that outlive their task's name."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from kvprune import ComposedPress, FastVPress, FramePress, KNormPress, TokenDropPress, register_press
from kvprune.harness.cli import main
from kvprune.harness.sweep.rows import KEY_FIELDS
from kvprune.harness.sweep.store import read_log
from kvprune.harness.sweep.plan import runs_of
from kvprune.harness.sweep.config import SweepConfig
from kvprune.harness.tasks.task import TASKS as REGISTERED_TASKS
from kvprune.harness.tasks.task import get_task
from kvprune.press import PRESSES
from tests.support import task_fixtures
from tests.support.paths import REPO
from tests.support.results import line_key, result_lines

TASKS = ["gtzan", "had"]
# what a rerun must reproduce exactly; timings and timestamps differ run to run
COMPARED = ["model", "task", "method", "ratio", "layer", "method_id", "sample_id", "input_hash", "settings_id", "output",
            "parsed", "reference", "correct", "audio_tokens", "kept_tokens", "error"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return task_fixtures.gtzan_and_had(tmp_path_factory.mktemp("data"), real=2, fake=2)


def scoring_rows(out: Path) -> list[dict]:
    """The rows that score (every sample and run once), not the timing subset's repeats."""
    return [row for row in result_lines(out) if row.get("pass") is None]


def sweep_args(data_root: Path, out: Path) -> list[str]:
    return [
        "sweep", "--model", "demo", "--tasks", ",".join(TASKS), "--methods", "fastv,dart",
        "--ratios", "0.3,0.7", "--limit", "3", "--data-root", str(data_root), "--out", str(out),
        "--device", "cpu", "--quiet", "--no-reuse-encoder", "--no-share-layers",
    ]


def by_key(rows: list[dict]) -> dict[tuple, dict]:
    return {line_key(r): {k: r.get(k) for k in COMPARED} for r in rows}


@pytest.fixture(scope="module")
def uninterrupted(data_root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    assert main(sweep_args(data_root, out)) == 0
    return out


def expected_runs(data_root: Path) -> int:
    """Samples (at most 3 per task) x (baseline + 2 methods x 2 ratios)."""
    return sum(len(get_task(t).load(data_root, limit=3)) for t in TASKS) * 5


def test_every_run_is_recorded_once(uninterrupted, data_root):
    rows = result_lines(uninterrupted)
    assert len(rows) == expected_runs(data_root) == len(by_key(rows))
    assert {(r["method"], r["ratio"]) for r in rows} == {("none", 0.0), ("fastv", 0.3), ("fastv", 0.7), ("dart", 0.3), ("dart", 0.7)}
    assert all(r["error"] is None for r in rows)
    first = rows[0]
    assert first["warmup"] and not any(r["warmup"] for r in rows if r["sample_id"] != first["sample_id"] or r["task"] != first["task"])
    for row in rows:
        assert row["prefill_s"] > 0 and row["decode_s"] >= 0 and row["new_tokens"] >= 1
        assert row["kv_cache_bytes"] > 0 and row["audio_seconds"] > 0
        assert row["kept_tokens"] == (row["audio_tokens"] if row["method"] == "none" else
                                      max(1, round(row["audio_tokens"] * (1 - row["ratio"]))))


def test_a_killed_sweep_resumes_to_the_same_results(data_root, uninterrupted, tmp_path):
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "kvprune.harness.cli", *sweep_args(data_root, out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if results.exists() and results.read_text().count("\n") >= 7:
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the sweep finished before it could be killed"
    partial = result_lines(out)
    assert 7 <= len(partial) < expected_runs(data_root)

    assert main(sweep_args(data_root, out)) == 0
    resumed = result_lines(out)
    assert len(resumed) == len(by_key(resumed)), "no run is recorded twice"
    assert by_key(resumed) == by_key(result_lines(uninterrupted))


def test_outputs_are_written_and_readable(uninterrupted):
    summary = pd.read_csv(uninterrupted / "summary.csv")
    assert len(summary) == len(TASKS) * 5
    assert set(summary["metric"]) == {"f1_macro"}
    baseline = summary[summary["method"] == "none"]
    assert (baseline["prefill_speedup"] == 1.0).all() and (baseline["kv_saved"].abs() < 1e-12).all()
    pruned = summary[summary["method"] != "none"]
    assert (pruned["kv_saved"] > 0).all(), "pruned runs hold a smaller cache after prefill"
    for png in uninterrupted.glob("*.png"):
        image = matplotlib.image.imread(png)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200
    assert sorted(png.name for png in uninterrupted.glob("*.png")) == [
        "demo_kv_saved.png", "demo_score_vs_prefill.png", "demo_score_vs_ratio.png"
    ]
    assert set(summary["cache"]) == {"engine"}, "--cache auto decodes with kvprune's generation engine"
    report = (uninterrupted / "report.md").read_text()
    assert "![KV saved](demo_kv_saved.png)" in report and "| KV cache held after prefill, MiB (median) | KV cache saved after prefill | decoding cache |" in report
    for task in TASKS:
        assert f"#### {task} (f1_macro)" in report
    assert "#### Average over the 2 tasks every method ran" in report


def test_plot_and_report_commands(uninterrupted, capsys):
    assert main(["plot", str(uninterrupted)]) == 0
    assert main(["report", str(uninterrupted)]) == 0
    printed = capsys.readouterr().out
    assert "score_vs_ratio.png" in printed and "report.md" in printed


def test_notebook_analyses_a_results_folder_and_every_figure_has_a_legend(uninterrupted, monkeypatch, tmp_path):
    import matplotlib.pyplot as plt

    monkeypatch.setenv("KVPRUNE_RESULTS", str(uninterrupted))
    monkeypatch.setenv("KVPRUNE_FIGURES", str(tmp_path))
    plt.close("all")
    notebook = json.loads((REPO / "notebooks" / "analysis.ipynb").read_text())
    namespace: dict = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), "analysis.ipynb", "exec"), namespace)
    assert len(namespace["summary"]) == len(TASKS) * 5
    figures = [plt.figure(number) for number in plt.get_fignums()]  # a non-interactive backend keeps them open
    assert len(figures) == 2 * len(TASKS)
    assert all(ax.get_legend() for figure in figures for ax in figure.axes)
    plt.close("all")


def test_a_bad_audio_file_is_recorded_and_the_sweep_goes_on(tmp_path):
    root = tmp_path / "data"
    task_fixtures.had(root, real=2, fake=1)
    broken = sorted((root / "HAD" / "real").glob("*.wav"))[0]
    broken.write_bytes(b"not audio at all")
    out = tmp_path / "out"
    args = sweep_args(root, out)
    args[args.index("--tasks") + 1] = "had"
    assert main(args) == 1, "runs failed: the exit status says so"
    rows = result_lines(out)
    failed = [r for r in rows if r["error"]]
    assert failed and all(r["sample_id"] == f"real/{broken.name}" for r in failed)
    assert all("cannot read audio file" in r["error"] for r in failed)
    assert len(failed) == 5 and len(rows) == 15


@pytest.mark.parametrize(
    "change,message",
    [
        (("--data-root", "/nonexistent/folder"), "not a directory"),
        (("--tasks", "gtzan,nope"), "unknown task 'nope'"),
        (("--methods", "fastv,h2o"), "unknown press 'h2o'"),
        (("--ratios", "0.5..1.2"), "ratio=1.0"),
        (("--model", "/nonexistent/model"), "/nonexistent/model"),
        (("--methods", ""), "no method given: pass --methods"),
        (("--methods", " , "), "no method given"),
    ],
)
def test_user_errors_name_the_problem(data_root, tmp_path, capsys, change, message):
    args = sweep_args(data_root, tmp_path / "out")
    flag, value = change
    args[args.index(flag) + 1] = value
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_missing_task_data_names_the_expected_layout(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(sweep_args(empty, tmp_path / "out")) == 2
    error = capsys.readouterr().err
    assert "GTZAN" in error and "Expected layout" in error


def test_sweep_config_file_with_overrides(data_root, tmp_path):
    config = tmp_path / "sweep.yaml"
    config.write_text(f"model: demo\ntasks: [had]\nmethods: [frame]\nratios: 0.5\nlimit: 2\nout: {tmp_path / 'from_yaml'}\n")
    assert main(["sweep", "--config", str(config), "--data-root", str(data_root), "--methods", "random", "--quiet", "--device", "cpu"]) == 0
    rows = scoring_rows(tmp_path / "from_yaml")
    assert {r["method"] for r in rows} == {"none", "random"} and len(rows) == 4
    config.write_text("model: x\nratio: 0.5\n")
    with pytest.raises(ValueError, match="unknown setting\\(s\\) ratio; known: .*, model, models, "):
        from kvprune.harness.sweep.config import SweepConfig

        SweepConfig.build(config, data_root=data_root)
    config.write_text("model: demo\ntasks: [had]\nmax_new_tokens: -1\n")
    with pytest.raises(ValueError, match="max_new_tokens=-1 is invalid: it must be a whole number, at least 1"):
        SweepConfig.build(config, data_root=data_root)


def test_no_arguments_runs_the_embedded_demo(tmp_path, monkeypatch, capsys):
    """The README's run command, cut down: the demo model on its regenerated held-out suite."""
    monkeypatch.setenv("KVPRUNE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "demo"
    assert main(["sweep", "--limit", "1", "--methods", "frame", "--ratios", "0.5", "--out", str(out), "--quiet"]) == 0
    rows = scoring_rows(out)
    assert {r["task"] for r in rows} == {"demo_pitch", "demo_count", "demo_event", "demo_order"}
    assert {r["model"] for r in rows} == {"demo"} and len(rows) == 8
    assert "embedded demo model" in capsys.readouterr().out


@pytest.mark.parametrize("model_line", ["model: demo\n", ""])
def test_a_sweep_file_naming_the_demo_or_no_model_gets_the_demos_defaults(model_line, tmp_path, monkeypatch, capsys):
    """As on the command line: the demo's tasks, suite and folder fill what the file leaves unset."""
    monkeypatch.setenv("KVPRUNE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "demo"
    config = tmp_path / "sweep.yaml"
    config.write_text(f"{model_line}tasks: [demo_count]\nmethods: [frame]\nratios: 0.5\nlimit: 1\nout: {out}\n")
    assert main(["sweep", "--config", str(config), "--quiet"]) == 0
    rows = scoring_rows(out)
    assert {(r["model"], r["task"]) for r in rows} == {("demo", "demo_count")} and len(rows) == 2
    assert "embedded demo model" in capsys.readouterr().out


def test_the_demo_model_on_other_tasks_and_data_is_not_announced_as_the_demo_suite(data_root, tmp_path, capsys):
    arguments = [*sweep_args(data_root, tmp_path / "out"), "--limit", "1", "--methods", "frame", "--ratios", "0.5"]
    assert main(arguments) == 0
    assert "embedded demo model" not in capsys.readouterr().out


def test_processes_of_a_distributed_sweep_share_the_samples(data_root, uninterrupted, tmp_path, monkeypatch):
    """Under ``accelerate launch`` each process runs every N-th sample into its own file; together
    they give exactly the single-process results (simulated here with two ranks in turn)."""
    import kvprune.harness.sweep.runner as runner

    out = tmp_path / "distributed"
    for rank in range(2):
        monkeypatch.setattr(runner, "process_share", lambda rank=rank: (rank, 2, "cpu"))
        assert main(sweep_args(data_root, out)) == 0
    assert sorted(p.name for p in out.glob("results*.jsonl")) == ["results.rank0.jsonl", "results.rank1.jsonl"]
    rank0 = {r["sample_id"] for r in read_rows_of(out / "results.rank0.jsonl")}
    rank1 = {r["sample_id"] for r in read_rows_of(out / "results.rank1.jsonl")}
    assert rank0 and rank1 and not rank0 & rank1
    assert by_key(result_lines(out)) == by_key(result_lines(uninterrupted))


def test_a_sweep_launched_as_two_processes_shares_the_samples(data_root, uninterrupted, tmp_path):
    """Two real processes (``torchrun``, what ``accelerate launch`` starts; a process group over gloo on
    a host without GPUs) each take every 2nd sample into their own file, and together give exactly the
    single-process results; the first process writes the outputs."""
    out = tmp_path / "launched"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "kvprune.harness.cli", *sweep_args(data_root, out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in out.glob("results*.jsonl")) == ["results.rank0.jsonl", "results.rank1.jsonl"]
    rank0 = {r["sample_id"] for r in read_rows_of(out / "results.rank0.jsonl")}
    rank1 = {r["sample_id"] for r in read_rows_of(out / "results.rank1.jsonl")}
    assert rank0 and rank1 and not rank0 & rank1
    assert by_key(result_lines(out)) == by_key(result_lines(uninterrupted))
    assert (out / "summary.csv").exists() and (out / "report.md").exists()
    assert not list(out.glob(".kvprune.rank*.lock"))


def read_rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass(frozen=True)
class TailPress(TokenDropPress):
    """A third party's press: keeps the last tokens of each clip."""

    def select(self, clip, evidence):
        return clip.positions(evidence.device)[clip.length - clip.n_keep :]


SPEC_METHODS = "dart:budget=reference,frame+knorm,frame+knorm:ratio=0.3,tail"


@pytest.fixture(scope="module")
def tail_press():
    register_press("tail", TailPress)
    yield
    PRESSES.unregister("tail")


@pytest.fixture(scope="module")
def spec_sweep(data_root, tail_press, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("specs")
    args = sweep_args(data_root, out)
    for flag, value in (("--tasks", "had"), ("--methods", SPEC_METHODS), ("--ratios", "0.5"), ("--limit", "2")):
        args[args.index(flag) + 1] = value
    assert main(args) == 0
    return out


def test_specs_with_parameters_and_compositions_are_swept_under_their_labels(spec_sweep):
    rows = result_lines(spec_sweep)
    assert all(r["error"] is None for r in rows)
    layers = {r["method"]: r["layer"] for r in rows}
    assert layers == {"none": None, "dart:budget=reference": 2, "frame+knorm": 1, "frame+knorm:ratio=0.3": 1, "tail": 2}
    for row in rows:
        if row["method"] != "none":  # frame drops half the tokens; the cache press compresses what is left
            assert row["kept_tokens"] == (round(row["audio_tokens"] * 0.5) if row["method"] != "dart:budget=reference"
                                          else 4 + 8 * int(row["audio_tokens"] * 0.5 / 8))
    kv = {r["method"]: r["kv_cache_bytes"] for r in rows if r["sample_id"] == rows[0]["sample_id"]}
    assert kv["frame+knorm"] < kv["frame+knorm:ratio=0.3"] < kv["tail"], "knorm at 0.5 evicts more than at 0.3"
    summary = pd.read_csv(spec_sweep / "summary.csv")
    assert sorted(summary["method"]) == sorted(["none", *SPEC_METHODS.split(",")])


def test_a_third_party_press_is_listed_and_swept(spec_sweep, capsys):
    assert main(["presses"]) == 0
    assert any(line.split()[:2] == ["tail", "token"] for line in capsys.readouterr().out.splitlines())
    tail = [r for r in result_lines(spec_sweep) if r["method"] == "tail"]
    assert len(tail) == 2 and all(r["kept_tokens"] == round(r["audio_tokens"] * 0.5) for r in tail)


def test_layer_goes_to_every_press_without_its_own(data_root):
    def presses(**overrides):
        config = SweepConfig.build(models="demo", tasks="had", data_root=data_root, ratios="0.5", **overrides)
        return [run.press for run in runs_of(config)[1:]]

    assert presses(methods="frame+knorm:layer=2") == [ComposedPress([FramePress(ratio=0.5), KNormPress(ratio=0.5, layer=2)])]
    assert presses(methods="frame+knorm:layer=2", layer=3) == [
        ComposedPress([FramePress(ratio=0.5, layer=3), KNormPress(ratio=0.5, layer=2)])
    ]
    fixed = runs_of(SweepConfig.build(models="demo", tasks="had", data_root=data_root, ratios="0.5,0.9",
                                      methods="knorm:ratio=0.3,fastv"))
    assert [(run.method, run.ratio, run.press) for run in fixed[1:]] == [
        ("knorm:ratio=0.3", 0.3, KNormPress(ratio=0.3)), ("fastv", 0.5, FastVPress(ratio=0.5)),
        ("fastv", 0.9, FastVPress(ratio=0.9))]
    with pytest.raises(ValueError, match="sets ratios 0.3, 0.5 in its presses"):
        SweepConfig.build(models="demo", tasks="had", data_root=data_root, methods="frame:ratio=0.5+knorm:ratio=0.3")


def test_a_user_task_file_is_swept_and_summarised(data_root, tmp_path):
    """--tasks takes a YAML path; the file builds on the built-in had and changes its metrics."""
    path = tmp_path / "had_by_accuracy.yaml"
    path.write_text("include: had\nmetrics: [accuracy, f1_weighted]\n")
    out = tmp_path / "out"
    args = sweep_args(data_root, out)
    for flag, value in (("--tasks", str(path)), ("--methods", "frame"), ("--ratios", "0.5"), ("--limit", "2")):
        args[args.index(flag) + 1] = value
    assert main(args) == 0
    rows = result_lines(out)
    assert {r["task"] for r in rows} == {"had_by_accuracy"} and len(rows) == 4
    recorded = read_log(out)[-1]["tasks"]
    assert recorded == {"had_by_accuracy": {**get_task("had").config, "name": "had_by_accuracy",
                                            "metrics": ["accuracy", "f1_weighted"]}}
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["metric"]) == {"accuracy"}
    for method, group in summary.groupby("method"):
        correct = [r["correct"] for r in rows if r["method"] == method]
        assert group["score"].iloc[0] == pytest.approx(100 * sum(correct) / len(correct))


@pytest.fixture
def had_renamed():
    """The built-in task had, unavailable under that name (as after a rename)."""
    registered = REGISTERED_TASKS.items()
    REGISTERED_TASKS.unregister("had")
    yield
    for name, _ in REGISTERED_TASKS.items():
        REGISTERED_TASKS.unregister(name)
    for name, path in registered:  # in the original order
        REGISTERED_TASKS.register(name, path)


def test_results_of_a_renamed_task_still_summarise_from_runs_jsonl(uninterrupted, tmp_path, had_renamed, capsys):
    out = tmp_path / "copy"
    shutil.copytree(uninterrupted, out)
    (out / "summary.csv").unlink()
    assert main(["report", str(out)]) == 0
    assert pd.read_csv(out / "summary.csv").equals(pd.read_csv(uninterrupted / "summary.csv"))

    runs = read_log(out)  # the summary follows the recorded config, not today's task files
    for run in runs:
        run["tasks"]["had"]["metrics"] = ["accuracy"]
    (out / "runs.jsonl").write_text("".join(json.dumps(run) + "\n" for run in runs))
    assert main(["report", str(out)]) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary[summary["task"] == "had"]["metric"]) == {"accuracy"}

    (out / "runs.jsonl").unlink()  # without the record, had is unknown
    assert main(["report", str(out)]) == 2
    assert "unknown task 'had'" in capsys.readouterr().err


def test_the_fast_encoder_is_on_by_default_recorded_and_changes_no_output(data_root, uninterrupted, tmp_path):
    fast_run = read_log(uninterrupted)[0]
    assert fast_run["encoder"] == "fast" and fast_run["config"]["encoder"] == "fast"
    assert len(fast_run["encoder_changes"]) == 1 and "(Qwen2_5OmniAudioEncoder)" in fast_run["encoder_changes"][0]

    out = tmp_path / "stock"
    args = sweep_args(data_root, out)
    for flag, value in (("--tasks", "had"), ("--methods", "fastv"), ("--ratios", "0.3")):
        args[args.index(flag) + 1] = value
    assert main([*args, "--stock-encoder"]) == 0
    stock_run = read_log(out)[0]
    assert (stock_run["encoder"], stock_run["encoder_changes"], stock_run["encoder_unchanged"]) == ("stock", [], [])
    # the encoder path is a setting of the run (not the same prefill times), so compare runs but their settings
    compared = [k for k in COMPARED if k != "settings_id"]
    stock = {_but_settings(r): {k: r.get(k) for k in compared} for r in result_lines(out)}
    fast = {key: row for key, row in ((_but_settings(r), {k: r.get(k) for k in compared}) for r in result_lines(uninterrupted))
            if key in stock}
    assert len(stock) == len(fast) == 3 * 2, "the stock rows are the fast sweep's had rows at fastv 0.3 and baseline"
    assert stock == fast
    assert "(stock audio encoder)" in (out / "report.md").read_text()


def _but_settings(row: dict) -> tuple:
    """A run's identity but its settings: the same sample, method and ratio under other settings."""
    return tuple(row.get(k) for k in KEY_FIELDS if k != "settings_id")


def test_static_cache_runs_record_their_cache_and_hold_what_the_engine_holds(data_root, uninterrupted, tmp_path):
    """--cache static (stock generate): same answers as the engine; each row says how it decoded, and
    its held KV bytes (the static cache's room for new tokens left out) equal the engine's."""
    out = tmp_path / "static"
    args = sweep_args(data_root, out)
    for flag, value in (("--tasks", "had"), ("--methods", "fastv"), ("--ratios", "0.3")):
        args[args.index(flag) + 1] = value
    assert main([*args, "--cache", "static"]) == 0
    assert read_log(out)[0]["config"]["cache"] == "static"
    static = result_lines(out)
    dynamic = {_but_settings(r): r for r in result_lines(uninterrupted)}
    assert len(static) == 3 * 2
    for row in static:
        same = dynamic[_but_settings(row)]
        assert row["settings_id"] != same["settings_id"], "the decoding cache is one of the settings a run depends on"
        assert (row["cache"], same["cache"], row["compiled"]) == ("static", "engine", False)  # no compiling on a CPU
        assert row["output"] == same["output"]
        assert row["kv_held_bytes"] == same["kv_held_bytes"] < row["kv_cache_bytes"]
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["cache"]) == {"static"}
    assert (summary[summary["method"] == "fastv"]["kv_saved"] > 0).all(), "saved bytes compare held entries"


def test_calls_that_compiled_are_left_out_of_timing_statistics(uninterrupted):
    from kvprune.harness.sweep.store import read_results
    from kvprune.harness.sweep.summary import summarize

    results = read_results(uninterrupted)
    before = summarize(results).set_index(["task", "method", "ratio"])["timed_samples"]
    compiled = (results["method"] == "fastv") & ~results["warmup"].astype(bool)
    first = results[compiled].groupby(["task", "ratio"]).head(1).index  # one compiling call per task and ratio
    results.loc[:, "compiled"] = False
    results.loc[first, "compiled"] = True
    after = summarize(results).set_index(["task", "method", "ratio"])["timed_samples"]
    dropped = (before - after).to_dict()
    assert {key: n for key, n in dropped.items() if n} == {(t, "fastv", r): 1 for t in TASKS for r in (0.3, 0.7)}


def test_each_task_s_record_counts_the_graphs_made_during_it(data_root, tmp_path, monkeypatch):
    """runs.jsonl's line for each task holds the CUDA graphs and compiled graphs made while it ran, and the host's
    speed as it started (what scripts/check_estimate.py sets against the estimate's, per task). On a CPU nothing is captured, so the engine's
    count is made to read one graph per call: each task's line then holds its own calls, and they add up to the
    model's line."""
    from kvprune.generation import Generator
    from kvprune.harness.sweep.store import ENGINE_RECORD, TASK_TIME_RECORD

    calls = []
    generate = Generator.generate
    monkeypatch.setattr(Generator, "generate", lambda self, *a, **k: calls.append(1) or generate(self, *a, **k))
    monkeypatch.setattr(Generator, "captures", property(lambda self: len(calls)))
    out = tmp_path / "out"
    args = sweep_args(data_root, out)
    args[args.index("--methods") + 1], args[args.index("--ratios") + 1] = "fastv", "0.5"
    assert main(args) == 0
    tasks = [r for r in read_log(out, kind=TASK_TIME_RECORD) if r.get("task")]
    [engine] = read_log(out, kind=ENGINE_RECORD)
    rows = result_lines(out)
    assert [r["task"] for r in tasks] == list(TASKS)
    for record in tasks:
        assert record["cuda_graphs"] == sum(1 for row in rows if row["task"] == record["task"]) > 0  # one call a row
        assert record["compile_graphs"] == 0  # nothing compiles on a CPU
        assert record["host_loop_ns"] > 0  # the host's speed as the task started
    assert sum(r["cuda_graphs"] for r in tasks) == engine["cuda_graphs"] == len(calls)
    assert engine["prefill_layers"] == "as written"  # the engine's default on a CPU


@pytest.mark.parametrize("compiles", [True, False], ids=["compiled", "failed"])
def test_the_engine_s_record_and_the_report_say_how_the_prefill_layers_ran(data_root, tmp_path, monkeypatch, compiles):
    """With ``--compile-prefill``, runs.jsonl's engine line and report.md's engine table say whether the prefills'
    layers >= K ran compiled, or as written after the compiler failed (and why); the sweep's rows are all there."""
    from functools import partial

    from kvprune.generation import generator as generator_module
    from kvprune.generation.prefill_layers import CompiledLayers
    from kvprune.harness.sweep.store import ENGINE_RECORD

    def failing(graph, example_inputs):
        raise RuntimeError("this backend compiles nothing")

    backend = "eager" if compiles else failing  # eager stands in for Inductor (minutes on these CPUs)
    monkeypatch.setattr(generator_module, "CompiledLayers", partial(CompiledLayers, backend=backend))
    out = tmp_path / "out"
    args = sweep_args(data_root, out) + ["--compile-prefill"]
    args[args.index("--methods") + 1], args[args.index("--ratios") + 1] = "fastv", "0.5"
    args[args.index("--tasks") + 1], args[args.index("--limit") + 1] = TASKS[0], "2"
    if compiles:
        assert main(args) == 0
    else:
        with pytest.warns(RuntimeWarning, match="could not compile"):
            assert main(args) == 0
    [engine] = read_log(out, kind=ENGINE_RECORD)
    said = "compiled" if compiles else "as written: "
    assert engine["prefill_layers"].startswith(said)
    assert compiles or "this backend compiles nothing" in engine["prefill_layers"]
    report = (out / "report.md").read_text()
    assert "prefill layers >= K |" in report  # the engine table's column, and its cell:
    assert ("| compiled |" if compiles else "this backend compiles nothing |") in report
    assert len(result_lines(out)) == 2 * 2  # two samples, unpruned and FastV
