"""notebooks/analysis.ipynb executed headless in a Jupyter kernel (nbclient) on a small demo-model
folder: every cell runs, every plotting cell shows its figures, its own figures land in its own
folder, and the sweep's files are left as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvprune.harness.cli import main
from tests.support import task_fixtures
from tests.support.paths import REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = REPO / "notebooks" / "analysis.ipynb"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = task_fixtures.gtzan_and_had(tmp_path_factory.mktemp("data"), real=1, fake=1)
    out = tmp_path_factory.mktemp("sweep")
    assert main(["sweep", "--model", "demo", "--tasks", "gtzan,had", "--methods", "frame,fastv", "--ratios", "0.5",
                 "--limit", "2", "--data-root", str(root), "--out", str(out), "--device", "cpu", "--quiet"]) == 0
    return out


def test_the_notebook_executes_headless_with_its_figures_and_leaves_the_sweeps_files_alone(results, tmp_path, monkeypatch):
    before = {path.name: path.read_bytes() for path in results.iterdir()}
    figures = tmp_path / "figures"
    monkeypatch.setenv("KVPRUNE_RESULTS", str(results))
    monkeypatch.setenv("KVPRUNE_FIGURES", str(figures))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert not [output for cell in code for output in cell.outputs if output.output_type == "error"]
    images = [sum("image/png" in output.get("data", {}) for output in cell.outputs) for cell in code]
    plotting = [i for i, cell in enumerate(code) if "plt.subplots" in cell.source or "plot_summary(" in cell.source]
    tasks = 2
    assert [images[i] for i in plotting] == [tasks, tasks, 3], "each task's figure, then the three of `kvprune plot`"
    assert sorted(path.name for path in figures.iterdir()) == [
        "demo_kv_saved.png", "demo_score_vs_prefill.png", "demo_score_vs_ratio.png"]
    assert {path.name: path.read_bytes() for path in results.iterdir()} == before, "the sweep's files are untouched"
