"""scripts/ab_decode_step.py on the tiny preset on the CPU (the GPU run is the same code, compiled): variants'
settings hold for their own runs only, every variant runs a case before the next case, tokens are compared with the
first variant's."""

from __future__ import annotations

import json

import pytest

from kvprune.generation import gemv
from tests.support.paths import load_script

pytestmark = pytest.mark.usefixtures("one_thread")


def test_variants_alternate_with_their_own_settings_then_the_code_is_as_it_was(tmp_path, monkeypatch):
    script = load_script("ab_decode_step", monkeypatch)
    seen = []
    run_variant = script.run_variant

    def spying(*args):
        seen.append((gemv.FUSE_GATES, gemv.MAX_ROWS))
        return run_variant(*args)

    monkeypatch.setattr(script, "run_variant", spying)
    before = (gemv.FUSE_GATES, gemv.MAX_ROWS)
    results = script.main(["--tiny", "--variants", "base; lean:kvprune.generation.gemv.FUSE_GATES=False,"
                           "kvprune.generation.gemv.MAX_ROWS=1", "--methods", "fastv,none", "--batch-sizes", "2",
                           "--seconds", "2", "--steps", "2", "--repeats", "1", "--rounds", "2", "--out", str(tmp_path)])
    assert seen == [before, (False, 1)] * 4
    assert (gemv.FUSE_GATES, gemv.MAX_ROWS) == before
    assert [(r["round"], r["variant"], r["method"]) for r in results] == [
        (0, "base", "fastv"), (0, "lean", "fastv"), (0, "base", "none"), (0, "lean", "none"),
        (1, "base", "fastv"), (1, "lean", "fastv"), (1, "base", "none"), (1, "lean", "none")]
    assert all(r["tokens_equal_first"] and r["median_ms"] > 0 and len(r["step_ms"]) == 1 for r in results)
    logged = [json.loads(line) for line in (tmp_path / "ab.jsonl").read_text().splitlines()]
    assert logged == results
    assert "| fastv | 2 | " in (tmp_path / "ab.md").read_text()


def test_the_table_gives_each_round_per_variant_and_says_where_tokens_differ(monkeypatch):
    script = load_script("ab_decode_step", monkeypatch)
    row = dict(method="fastv", rows=64, tokens_equal_first=True)
    results = [dict(row, variant="a", median_ms=6.2441), dict(row, variant="b", median_ms=6.36),
               dict(row, variant="a", median_ms=6.2422), dict(row, variant="b", median_ms=6.35, tokens_equal_first=False)]
    text = script.table(results, ["a", "b", "c"])
    assert "| fastv | 64 | 6.244 / 6.242 | 6.360 / 6.350 | - |" in text
    assert "tokens differ from the first variant's first round in: b" in text


@pytest.mark.parametrize("variants, problem", [
    ("a;a", "distinct names"),
    ("a:kvprune.generation.gemv.NO_SUCH=1", "has no attribute 'NO_SUCH'"),
    ("a:kvprune.no_such_module.X=1", "no module 'kvprune.no_such_module'"),
    ("a:kvprune.generation.gemv.MAX_ROWS=sixty", "no Python literal"),
    ("a:MAX_ROWS", "module.attribute=value"),
])
def test_bad_variants_say_what_to_write(monkeypatch, variants, problem):
    script = load_script("ab_decode_step", monkeypatch)
    with pytest.raises(SystemExit, match=problem):
        script.parse_variants(variants)


def test_a_spent_budget_starts_no_further_case(tmp_path, monkeypatch, capsys):
    script = load_script("ab_decode_step", monkeypatch)
    monkeypatch.setattr(script, "run_variant", lambda *args: pytest.fail("a case started past the budget"))
    results = script.main(["--tiny", "--variants", "a;b", "--batch-sizes", "2", "--budget-s", "-1", "--out", str(tmp_path)])
    assert results == [] and "stopping before round 0 of fastv at 2 rows" in capsys.readouterr().out
