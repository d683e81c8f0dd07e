"""A sweep shares each sample's layers < K between its token presses at one K: the rows say which runs
replayed them, the answers are those of a sweep that shares nothing, and the report says so (CPU, the
demo model)."""

from __future__ import annotations

from kvprune.harness.cli import main

from tests.support.results import result_lines


COMPARED = ["sample_id", "method", "ratio", "output", "parsed", "kept_tokens", "error"]


def sweep(out, *extra: str) -> int:
    return main(["sweep", "--tasks", "demo_count", "--limit", "3", "--methods", "fastv,dart,frame+knorm", "--ratios",
                 "0.3,0.7", "--batch-size", "2", "--timing-samples", "1", "--max-new-tokens", "3", "--out", str(out),
                 "--device", "cpu", "--quiet", "--no-plots", *extra])


def test_token_presses_at_one_k_replay_a_sample_s_first_layers_with_unchanged_answers(tmp_path):
    assert sweep(tmp_path / "shared") == 0
    assert sweep(tmp_path / "alone", "--no-share-layers") == 0
    shared, alone = result_lines(tmp_path / "shared"), result_lines(tmp_path / "alone")
    key = lambda row: (row["sample_id"], row["method"], row["ratio"], row.get("pass"))  # noqa: E731
    assert sorted(({k: r[k] for k in COMPARED} for r in shared), key=str) == sorted(
        ({k: r[k] for k in COMPARED} for r in alone), key=str)
    scoring = [r for r in shared if r.get("pass") is None]
    replayed = {(r["method"], r["ratio"]) for r in scoring if r["layers_reused"]}
    # fastv at 0.3 runs them first (K = 2); fastv 0.7 and dart replay; knorm rewrites layer 1's cache: never
    assert replayed == {("fastv", 0.7), ("dart", 0.3), ("dart", 0.7)}
    assert not any(r["layers_reused"] for r in shared if r.get("pass") is not None), "the timing subset shares nothing"
    assert not any(r["layers_reused"] for r in result_lines(tmp_path / "alone"))
    assert len({key(r) for r in shared}) == len(shared)
    report = (tmp_path / "shared" / "report.md").read_text()
    assert "replayed them" in report
