"""The demo's held-out suite: regenerated from its seed into a cache folder, checked against shipped hashes.

The audio (80 clips of 15 s, ~38 MB) is not shipped; ``suite_manifest.json`` holds the seed, the
sizes and the sha256 of every file, so a regenerated suite is known to be the one the demo model
was evaluated on.

    python -m kvprune.harness.demo.suite              # print where the verified suite is
    python -m kvprune.harness.demo.suite --write      # rewrite the shipped manifest (after changing the generator)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .synthetic import DEFAULT_DURATION_S, TASKS, generate_suite, suite_manifest

MANIFEST_PATH = Path(__file__).resolve().parent / "suite_manifest.json"
HELD_OUT = {"test": 20}


class SuiteMismatchError(RuntimeError):
    """The regenerated suite differs from the shipped manifest (another numpy, or a changed generator)."""


def load_manifest(path: Path = MANIFEST_PATH) -> dict:
    return json.loads(Path(path).read_text())


def default_cache_dir() -> Path:
    return Path(os.environ.get("KVPRUNE_CACHE", Path.home() / ".cache" / "kvprune"))


def _mismatches(folder: Path, files: dict[str, str]) -> list[str]:
    found = suite_manifest(folder) if folder.is_dir() else {}
    return sorted(name for name in files.keys() | found.keys() if files.get(name) != found.get(name))


def demo_suite(cache_dir: str | Path | None = None) -> Path:
    """The held-out suite on disk (AudioMarathon layout, one folder per task), generated if missing.

    Raises ``SuiteMismatchError`` if what the generator writes here differs from the shipped hashes."""
    manifest = load_manifest()
    files = manifest["files"]
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:12]
    folder = Path(cache_dir or default_cache_dir()) / f"demo_suite-{digest}"
    if not _mismatches(folder, files):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="demo_suite-", dir=folder.parent))
    generate_suite(scratch, seed=manifest["seed"], splits=manifest["splits"], duration_s=manifest["duration_s"],
                   tasks=tuple(manifest["tasks"]))
    wrong = _mismatches(scratch, files)
    if wrong:
        shutil.rmtree(scratch)
        raise SuiteMismatchError(
            f"{len(wrong)} regenerated file(s) differ from {MANIFEST_PATH.name} (numpy {np.__version__} here, "
            f"{manifest['numpy']} when it was written), e.g. {wrong[:3]}"
        )
    shutil.rmtree(folder, ignore_errors=True)
    scratch.rename(folder)
    return folder


def write_manifest(path: Path = MANIFEST_PATH, *, seed: int = 0, splits: dict[str, int] = HELD_OUT,
                   duration_s: float = DEFAULT_DURATION_S) -> dict:
    """Generate the held-out suite in a temporary folder and record how, and every file's hash."""
    with tempfile.TemporaryDirectory() as scratch:
        generate_suite(scratch, seed=seed, splits=splits, duration_s=duration_s)
        files = suite_manifest(scratch)
    manifest = {"seed": seed, "splits": dict(splits), "duration_s": duration_s, "tasks": list(TASKS),
                "numpy": np.__version__, "files": files}
    Path(path).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the shipped manifest")
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.write:
        manifest = write_manifest()
        print(f"wrote {MANIFEST_PATH} ({len(manifest['files'])} files)")
    else:
        print(demo_suite(args.cache_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
