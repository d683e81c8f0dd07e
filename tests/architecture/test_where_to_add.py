"""docs/architecture.md's "Where to add", followed to the letter in a copy of the repository: a press, a
model family, a task and a benchmark are added by touching exactly the files its table lists for them
(a benchmark: one new folder and one registry line), and then work (listed, run on a tiny model,
resolved, loaded, scored) and keep the tests that cover every press and family green. If this fails
because a file the table does not list had to change, fix the table."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

PRESS, FAMILY, TASK, BENCHMARK = "keep_first", "dummy_audio", "genre_check", "dummy_bench"
TASK_HOME = "audiomarathon"  # the benchmark folder the added task joins (it reads GTZAN's data)

PRESS_MODULE = '''\
"""Keep the first tokens of each clip (a press added by following docs/architecture.md)."""

from dataclasses import dataclass

from kvprune.press import TokenDropPress, register_press


@register_press("keep_first")
@dataclass(frozen=True)
class KeepFirstPress(TokenDropPress):
    def select(self, clip, evidence):
        return clip.positions(evidence.device)[: clip.n_keep]
'''

FAMILY_MODULE = '''\
"""Qwen2-Audio's model under another class and model_type (a family added by following docs/architecture.md)."""

from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

from .audio_format import WhisperChunkAudio
from .base import ModelFamily, register_family
from .parts import Prompting, Tiny
from .qwen2_audio import TINY, build_inputs


class DummyAudioConfig(Qwen2AudioConfig):
    model_type = "dummy_audio"


class DummyAudioForConditionalGeneration(Qwen2AudioForConditionalGeneration):
    config_class = DummyAudioConfig


DUMMY_AUDIO = register_family(
    ModelFamily(
        name="dummy_audio",
        display_name="Dummy-Audio",
        model_class=DummyAudioForConditionalGeneration,
        prompting=Prompting(
            audio_format=WhisperChunkAudio(), llm_tokens_per_second=25.0, build_inputs=build_inputs, max_clip_seconds=30.0
        ),
        tiny=Tiny(TINY),
    )
)
'''
PRESS_ROW = "| `keep_first` | token | the first tokens of each clip | none | kvprune's example press |"

TASK_FILE = """\
# A quick genre check on GTZAN's data (a task added by following docs/architecture.md).
title: Genre check
benchmark: dummy
abbreviation: GC
data_dir: GTZAN
layout: json_items
layout_options:
  metadata: music_genre_classification_meta.json
  audio_root: [wav, .]
prompt: |-
  {question}
  {options}
parser: multiple_choice
metrics: [accuracy]
max_new_tokens: 4
"""

# A benchmark: its folder (a task on GTZAN's data, its suite, its rule as a pure function, the metric that
# wires it, its README) and one import line.
BENCHMARK_FILES = {
    "__init__.py": '''"""Dummy-Bench (a benchmark added by following docs/architecture.md). See README.md."""

from . import metrics  # noqa: F401  (it registers)
''',
    "rules.py": '''"""Dummy-Bench's official rule: a reply is right when it names the gold option's text, whatever its case."""


def names_gold(reply: str, gold_text: str) -> bool:
    return gold_text.lower() in reply.lower()
''',
    "metrics.py": '''"""Dummy-Bench's metric, wired from its rule."""

from ...metrics import Metric, mean_correct, register_metric
from .rules import names_gold


def _per_sample(parsed, sample):
    gold = sample.choices["ABCD".index(sample.answer)]
    return {"correct": float(names_gold(parsed or "", gold))}


register_metric(Metric("dummy_bench_names_gold", mean_correct, _per_sample))
''',
    "dummy_bench_genre.yaml": TASK_FILE.replace("Genre check", "Dummy-Bench genre").replace("benchmark: dummy", "benchmark: Dummy-Bench")
    .replace("parser: multiple_choice", "parser: raw").replace("metrics: [accuracy]", "metrics: [dummy_bench_names_gold]"),
    "suite.yaml": "title: Dummy-Bench\nbenchmark: Dummy-Bench\ntasks: [dummy_bench_genre]\n",
    "README.md": "# Dummy-Bench\n\nA benchmark added by following docs/architecture.md: one task on GTZAN's data.\n",
}

CHECKS = '''\
"""What was added by following docs/architecture.md works (run in the copy)."""

import torch

from kvprune import get_press, list_presses, resolve_family
from kvprune.harness.cli import main
from kvprune.harness.tasks.benchmark import BENCHMARKS
from kvprune.harness.tasks.suites import get_suite
from kvprune.harness.tasks.task import get_task
from kvprune.models import FAMILIES
from tests.support import task_fixtures
from tests.support.tiny_models import FAMILIES as TINY


def test_added_press_is_listed_and_keeps_the_first_tokens():
    assert "keep_first" in list_presses(kind="token")
    tiny = TINY["qwen2_audio"]
    model = tiny.build("sdpa")
    with torch.no_grad(), get_press("keep_first", ratio=0.5)(model) as outcome:
        model(**tiny.inputs([[("text", 3), ("audio", 8), ("text", 4)]]))
    assert outcome.kept_positions[0].tolist() == [3, 4, 5, 6]


def test_added_family_resolves_the_tiny_model_built_from_it(capsys):
    family = FAMILIES.get("dummy_audio")
    model = family.build(family.tiny_config())
    assert resolve_family(model) is family and TINY["dummy_audio"].family is family
    assert main(["families"]) == 0
    assert "Dummy-Audio" in capsys.readouterr().out


def test_added_task_loads_and_is_listed(tmp_path, capsys):
    written = task_fixtures.gtzan(tmp_path)
    assert [s.id for s in get_task("genre_check").load(tmp_path)] == [sample_id for sample_id, _ in written]
    assert main(["tasks"]) == 0
    assert "genre_check" in capsys.readouterr().out.split()


def test_added_benchmark_is_found_by_name_and_scores_with_its_rule(tmp_path, capsys):
    written = task_fixtures.gtzan(tmp_path)
    assert BENCHMARKS.get("dummy_bench").readme.is_file()
    assert get_suite("dummy_bench").tasks == ("dummy_bench_genre",)
    task = get_task("dummy_bench_genre")
    samples = task.load(tmp_path)
    assert [s.id for s in samples] == [sample_id for sample_id, _ in written]
    gold = samples[0].choices["ABCD".index(samples[0].answer)]
    assert task.grade(f"It is {gold.upper()}.", samples[0]).scores == {"correct": 1.0}
    assert task.grade("I cannot tell.", samples[0]).scores == {"correct": 0.0}
    assert main(["tasks"]) == 0
    assert "dummy_bench_genre" in capsys.readouterr().out.split()
'''

# The copy's packages under their installed names (kvprune.presses is presses/, kvprune.harness is
# harness/), found before the editable install's finder; the copy's root for ``tests``.
BOOT = '''\
import importlib.util, sys
from pathlib import Path

ROOT = Path.cwd()
PACKAGES = {"kvprune": ROOT / "kvprune", "kvprune.presses": ROOT / "presses", "kvprune.harness": ROOT / "harness"}


class CopyFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        folder = PACKAGES.get(name)
        if folder is not None:
            return importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])


sys.meta_path.insert(0, CopyFinder)
sys.path.insert(0, str(ROOT))
import pytest

sys.exit(pytest.main(sys.argv[1:]))
'''
# the tests that cover every press and family, on what was added: each fails if a listed file was left out
COVERING = ["tests/presses/test_token_presses.py", "tests/models/test_families.py", "tests/models/test_processors.py",
            "tests/core/test_registry.py", "tests/architecture/test_added.py"]
SELECTED = (f"list_presses or ({PRESS} and (qwen2_audio or {FAMILY})) or ({FAMILY} and not test_token_presses) "
            "or readme or model_families or test_added")


def _where_to_add() -> dict[str, set[str]]:
    """The "Where to add" table: what is added -> the files it touches."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("\n## Where to add\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ") and "`" in line]
    path = re.compile(r"[\w./<>-]+(?:\.(?:py|md|yaml)|/)")  # the files and folders, not the other names in backticks
    return {what.strip(): {name for name in re.findall(r"`([^`]+)`", files) if path.fullmatch(name)}
            for what, files, *_ in rows}


def _listed(what: str, name: str) -> set[str]:
    table = _where_to_add()
    assert what in table, f'docs/architecture.md "Where to add" has no row {what!r}: {sorted(table)}'
    return {path.replace("<name>", name).replace("<benchmark>", TASK_HOME) for path in table[what]}


def _as_listed(changed: set[str], listed: set[str]) -> set[str]:
    """The changed files, those inside a listed folder (``.../``) counted as that folder."""
    folders = [entry for entry in listed if entry.endswith("/")]
    return {next((folder for folder in folders if name.startswith(folder)), name) for name in changed}


def _copy_of_the_repository(root: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, root / name)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


def _edit(path: Path, pattern: str, replacement: str) -> None:
    """One edit a person would make, at an anchor that must exist exactly once."""
    text = path.read_text()
    edited, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    assert count == 1, f"{path.name}: the anchor {pattern!r} of this test is gone; update the test with the file"
    path.write_text(edited)


def _import_line(init: Path, line: str) -> None:
    """``line`` after the package's last ``from .module import`` line."""
    _edit(init, r"((?:^from \.\w+ import [^\n(]+\n)+)", rf"\1{line}\n")


def _table_row(readme: Path, header: str, row: str) -> None:
    """``row`` at the end of the Markdown table whose header starts with ``header``."""
    _edit(readme, rf"(^{re.escape(header)}.*\n(?:^\|.*\n)+)", rf"\1{row}\n")


def _add_press(root: Path) -> None:
    (root / "presses" / f"{PRESS}.py").write_text(PRESS_MODULE)
    _import_line(root / "presses" / "__init__.py", "from .keep_first import KeepFirstPress")
    _table_row(root / "README.md", "| press | kind | keeps |", PRESS_ROW)
    _edit(root / "tests" / "presses" / "test_token_presses.py", r'^(PRESSES = \[.*)\]$', rf'\1, "{PRESS}"]')


def _add_family(root: Path) -> None:
    (root / "kvprune" / "models" / f"{FAMILY}.py").write_text(FAMILY_MODULE)
    # its tiny config: its real processor's class built offline (Qwen2-Audio's, as the model is Qwen2-Audio's)
    _edit(root / "tests" / "support" / "tiny_processors.py", r'if name in \("qwen2_audio", "aero"\):',
          f'if name in ("qwen2_audio", "aero", "{FAMILY}"):')


def _add_task(root: Path) -> None:
    (root / "harness" / "tasks" / "benchmarks" / TASK_HOME / f"{TASK}.yaml").write_text(TASK_FILE)


def _add_benchmark(root: Path) -> None:
    folder = root / "harness" / "tasks" / "benchmarks" / BENCHMARK
    folder.mkdir()
    for name, text in BENCHMARK_FILES.items():
        (folder / name).write_text(text)
    _edit(root / "harness" / "tasks" / "benchmarks" / "__init__.py", r"((?:^from \. import \w+.*\n)+)",
          rf"\1from . import {BENCHMARK}  # noqa: F401\n")


def test_the_table_lists_the_files_of_each_kind():
    table = _where_to_add()
    assert {"a token-dropping press", "a model family", "a task", "a benchmark"} <= table.keys(), sorted(table)
    missing = sorted(path for files in table.values() for path in files
                     if "<" not in path and not (REPO / path).exists())
    assert not missing, f"the table names files that do not exist: {missing}"


def test_a_press_a_family_and_a_task_added_as_the_docs_say(tmp_path):
    root = tmp_path / "repository"
    _copy_of_the_repository(root)
    steps = [("a token-dropping press", PRESS, _add_press), ("a model family", FAMILY, _add_family), ("a task", TASK, _add_task),
             ("a benchmark", BENCHMARK, _add_benchmark)]
    for what, name, add in steps:
        before = _files(root)
        add(root)
        listed = _listed(what, name)
        assert _as_listed(_changed(before, _files(root)), listed) == listed, f"adding {what} as the docs say"
    (root / "tests" / "architecture" / "test_added.py").write_text(CHECKS)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", BOOT, "-q", "-rA", "-p", "no:cacheprovider", "-k", SELECTED, *COVERING],
        cwd=root, capture_output=True, text=True, timeout=600, env={**environment, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    passed = set(re.findall(r"^PASSED (\S+?)(?:\[|$)", result.stdout, re.MULTILINE))
    expected = {f"{path}::{test}" for path, test in [
        ("tests/architecture/test_added.py", "test_added_press_is_listed_and_keeps_the_first_tokens"),
        ("tests/architecture/test_added.py", "test_added_family_resolves_the_tiny_model_built_from_it"),
        ("tests/architecture/test_added.py", "test_added_task_loads_and_is_listed"),
        ("tests/architecture/test_added.py", "test_added_benchmark_is_found_by_name_and_scores_with_its_rule"),
        ("tests/presses/test_token_presses.py", "test_list_presses_names_the_four"),
        ("tests/models/test_families.py", "test_every_readme_row_shows_what_its_family_declares"),
        ("tests/models/test_processors.py", "test_processor_placeholders_equal_encoder_embeddings_and_the_family_arithmetic"),
        ("tests/core/test_registry.py", "test_model_families_are_a_registry"),
    ]}
    assert expected <= passed, f"not run: {sorted(expected - passed)}"
