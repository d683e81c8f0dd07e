"""A sweep spread over two machines with ``accelerate launch --num_machines 2`` (two launches on this
host standing for two hosts, meeting over loopback, writing to one shared folder) gives the rows of
one process, and the main machine writes the outputs (CPU, the demo model, a few samples)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kvprune.harness.cli import main

from tests.support.results import result_lines


SWEEP = ["sweep", "--tasks", "demo_count", "--limit", "4", "--methods", "fastv", "--ratios", "0.5", "--batch-size", "2",
         "--timing-samples", "1", "--device", "cpu", "--quiet", "--no-plots"]
COMPARED = ("task", "sample_id", "method", "ratio", "pass", "output", "parsed", "kept_tokens", "error")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rows(out: Path) -> list[tuple]:
    return sorted(tuple(str(row.get(k)) for k in COMPARED) for row in result_lines(out))


@pytest.mark.skipif(shutil.which("accelerate") is None and not os.path.exists(Path(sys.executable).parent / "accelerate"),
                    reason="accelerate's launcher is not installed")
def test_two_machines_give_the_rows_of_one_process(tmp_path):
    assert main([*SWEEP, "--out", str(tmp_path / "one")]) == 0
    launcher = shutil.which("accelerate") or str(Path(sys.executable).parent / "accelerate")
    port, shared = str(free_port()), tmp_path / "shared"
    machines = [subprocess.Popen(
        [launcher, "launch", "--multi_gpu", "--num_machines", "2", "--machine_rank", str(rank), "--num_processes", "2",
         "--main_process_ip", "127.0.0.1", "--main_process_port", port, "--mixed_precision", "no", "--dynamo_backend",
         "no", "-m", "kvprune.harness.cli", *SWEEP, "--out", str(shared)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        for rank in (0, 1)]
    for machine in machines:
        output, _ = machine.communicate(timeout=600)
        assert machine.returncode == 0, output[-3000:]
    assert sorted(p.name for p in shared.glob("results*.jsonl")) == ["results.rank0.jsonl", "results.rank1.jsonl"]
    assert rows(shared) == rows(tmp_path / "one")
    assert (shared / "summary.csv").exists() and (shared / "report.md").exists()
