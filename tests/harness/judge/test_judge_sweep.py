"""``--judge`` in ``kvprune sweep``, against an OpenAI-compatible server started here on 127.0.0.1:
AVI-Bench's refine step rewrites every reply before it is scored, judgements are cached under the
results folder (a rerun asks nothing), counted in report.md and retried; a judge that keeps failing
leaves error rows and a non-zero exit; MMAR-Rubrics needs a judge and rates right answers with it.
MMAR's metadata is read from MMAR-meta.json as well as MMAR-meta.jsonl."""

from __future__ import annotations

import json

import pytest

from tests.support import benchmark_fixtures
from tests.support.results import result_lines
from kvprune.harness.cli import main
from kvprune.harness.judge import OpenAIJudge, RetryPolicy
from kvprune.harness.sweep import judging
from kvprune.harness.tasks.benchmarks.avibench.refine import clean_json_output, refine_prompt

from kvprune.harness.tasks.task import get_task
from tests.harness.judge.test_judge import closed_port_url, server  # noqa: F401  (the local chat server fixture)

TASKS = "avibench_asqa,avibench_amic"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("judged")
    benchmark_fixtures.avibench_asqa(root)
    benchmark_fixtures.avibench_amic(root)
    benchmark_fixtures.mmar(root)
    return root


def sweep(data_root, out, tasks=TASKS, *extra) -> list[str]:
    return ["sweep", "--model", "demo", "--tasks", tasks, "--methods", "frame", "--ratios", "0.5",
            "--data-root", str(data_root), "--out", str(out), "--device", "cpu", "--quiet", "--no-plots",
            "--max-new-tokens", "3", *extra]


def judge_lines(out) -> list[dict]:
    return [json.loads(line) for line in (out / "judge.jsonl").read_text().splitlines()]


def test_the_refine_step_runs_through_the_judge_and_a_rerun_asks_nothing(server, data_root, tmp_path):
    judge = server(script=[503])  # the first request fails once: retried after 1 s
    out = tmp_path / "out"
    spec = f"openai:{judge.url}@refiner"
    assert main(sweep(data_root, out, TASKS, "--judge", spec)) == 0
    rows = result_lines(out)
    assert rows and all(r["error"] is None for r in rows)
    for row in rows:  # the echo judge answers the refine request with its prompt upper-cased
        prompt = refine_prompt(row["meta"]["entry"], row["output"]).upper()
        assert row["parsed"] == (prompt if row["task"] == "avibench_asqa" else clean_json_output(prompt))
    prompts = {refine_prompt(r["meta"]["entry"], r["output"]) for r in rows}
    assert len(judge.seen) == len(prompts) + 1, "one request per distinct judgement, and the retry"
    (record,) = judge_lines(out)
    assert (record["requests"], record["cache_hits"], record["retries"], record["failures"]) == (
        len(prompts) + 1, len(rows) - len(prompts), 1, 0)
    report = (out / "report.md").read_text()
    assert "## Judge" in report and f"{len(prompts) + 1} requests sent" in report

    asked = len(judge.seen)
    assert main(sweep(data_root, out, TASKS, "--judge", spec, "--overwrite")) == 0
    assert len(judge.seen) == asked, "every judgement of the rerun came from the cache"
    (record,) = judge_lines(out)
    assert (record["requests"], record["cache_hits"]) == (0, len(rows))
    assert [r["parsed"] for r in result_lines(out)] == [r["parsed"] for r in rows]


def test_a_failing_judge_leaves_error_rows_and_a_non_zero_exit(server, data_root, tmp_path):
    judge = server(script=[400] * 1000)  # a client error fails at once
    out = tmp_path / "out"
    assert main(sweep(data_root, out, TASKS, "--judge", f"openai:{judge.url}@refiner")) == 1
    rows = result_lines(out)
    assert rows and all("JudgeError" in r["error"] and "HTTP 400" in r["error"] for r in rows)
    assert all(r["parsed"] is None for r in rows), "never the unrefined reply"
    (record,) = judge_lines(out)
    assert record["failures"] == len(judge.seen) > 0
    assert "failed and 0 not asked" in (out / "report.md").read_text()


def test_a_judge_that_refuses_connections_is_given_up_on_and_retry_errors_grades_the_stored_outputs(
        server, data_root, tmp_path, monkeypatch, capsys):
    delays = []
    real = judging.parse_judge_spec
    monkeypatch.setattr(judging, "parse_judge_spec", lambda *a, **k: real(*a, retry=RetryPolicy(sleep=delays.append), **k))
    url, out = closed_port_url(), tmp_path / "out"
    spec = f"openai:{url}@refiner"
    assert main(sweep(data_root, out, TASKS, "--judge", spec)) == 1
    (record,) = judge_lines(out)
    assert record["requests"] == 5 and sum(delays) <= 30, "five tries and 15 s of backoff, then it stops asking"
    rows = result_lines(out)
    assert record["skipped"] == len(rows) - 1 and record["failures"] == 1
    sentence = f"judge {spec} stopped being asked after 5 tries in a row got no reply"
    assert all(r["error"].startswith(f"JudgeUnavailable: {sentence}") and r["output"] is not None for r in rows)
    assert capsys.readouterr().err.count(sentence) == 2, "said when it happened, and again when the sweep ends"
    report = (out / "report.md").read_text()
    assert f"**The judge stopped replying" in report and "Without --judge" not in report
    assert "Each is left out, as the benchmark's own scorer leaves out a question without an answer" in report
    assert "counts as a wrong answer" not in report

    live = server(port=int(url.rsplit(":", 1)[1].split("/")[0]))  # the endpoint comes up where it was expected
    assert main(sweep(data_root, out, TASKS, "--judge", spec, "--retry-errors")) == 0
    again = result_lines(out)[len(rows):]
    assert len(again) == len(rows) and all(r["error"] is None and r.get("rescored") for r in again), "graded, not generated"
    assert [r["output"] for r in again] == [r["output"] for r in rows]
    assert len(live.seen) == len({refine_prompt(r["meta"]["entry"], r["output"]) for r in rows})


def test_mmar_rubrics_needs_a_judge(data_root, tmp_path, capsys):
    assert main(sweep(data_root, tmp_path / "out", "mmar_rubrics")) == 2
    assert "scored by an LLM judge: run the sweep with --judge" in capsys.readouterr().err


def test_mmar_rubrics_rates_a_right_answer_with_the_judge(server, data_root, tmp_path):
    task = get_task("mmar_rubrics")
    items = benchmark_fixtures.mmar(tmp_path)
    items[1]["thinking"], items[1]["rubric"] = "Drums and guitars.", [
        {"name": "genre cues", "scoring_point": "names the instruments", "note": "", "choices": [0, 1, 2]},
        {"name": "conclusion", "scoring_point": "concludes rock", "note": "", "choices": [0, 1]},
    ]
    (tmp_path / "MMAR" / "MMAR-meta.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    ratings = iter([(2, 1), (1, 1), (0, 0), (2, 0), (1, 0)])  # 3/3, 2/3, 0, 2/3, 1/3: middle three 2/3, 2/3, 1/3

    def rate(messages):
        genre, conclusion = next(ratings)
        return json.dumps([{"name": "genre cues", "score": genre, "justification": "."},
                           {"name": "conclusion", "score": conclusion, "justification": "."}])

    endpoint = server(answer=rate)
    judge = OpenAIJudge(endpoint.url, "rater", retry=RetryPolicy(attempts=1))
    sample = task.load(tmp_path)[1]
    right = task.score("Drums and distorted guitars.\n<answer>rock</answer>", sample, judge)
    assert right["rubric"] == pytest.approx(100 * (2 / 3 + 2 / 3 + 1 / 3) / 3)
    assert judge.stats.requests == 5
    asked = endpoint.seen[0]["body"]["messages"][-1]["content"]
    assert "- Model's Reasoning:\nDrums and distorted guitars. The answer is rock." in asked and "<answer>" not in asked
    wrong = task.score("It swings.\n<answer>jazz</answer>", sample, judge)
    assert wrong["rubric"] == 0.0 and judge.stats.requests == 5, "a wrong answer scores 0 without asking"


def test_mmar_reads_its_json_file_as_well_as_json_lines(tmp_path):
    items = benchmark_fixtures.mmar(tmp_path / "lines")
    benchmark_fixtures.mmar(tmp_path / "list")
    (tmp_path / "list" / "MMAR" / "MMAR-meta.jsonl").unlink()
    (tmp_path / "list" / "MMAR" / "MMAR-meta.json").write_text(json.dumps(items))
    task = get_task("mmar")
    from_lines, from_list = task.load(tmp_path / "lines"), task.load(tmp_path / "list")
    assert [(s.id, s.answer, s.choices, s.meta) for s in from_list] == [(s.id, s.answer, s.choices, s.meta) for s in from_lines]
