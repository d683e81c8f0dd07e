"""The core (kvprune/ with kvprune.engine, kvprune.models, kvprune.encoders and kvprune.presses) depends on
nothing of the harness: no import of the harness, pandas, matplotlib, yaml, soundfile, tqdm or
accelerate by kvprune's own code.

torch and transformers load some of those themselves, so what is checked is every import statement
that a core module executes, recorded in a fresh interpreter; there the harness, pandas and
matplotlib cannot be imported at all, and a press still runs on a tiny model.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO

SCRIPT = r"""
import builtins, importlib, importlib.util, json, pkgutil, sys

FORBIDDEN = {"harness", "pandas", "matplotlib", "yaml", "soundfile", "tqdm", "accelerate"}
for blocked in ("kvprune.harness", "pandas", "matplotlib"):
    sys.modules[blocked] = None  # importing them raises ImportError
forbidden_imports = []
original_import = builtins.__import__


def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__", "")
    if importer.startswith("kvprune") and not importer.startswith("kvprune.harness"):
        target = importlib.util.resolve_name("." * level + name, globals["__package__"]) if level else name
        for candidate in [target, *(f"{target}.{item}" for item in fromlist or ())]:
            if candidate.split(".")[0] in FORBIDDEN or candidate.startswith("kvprune.harness"):
                forbidden_imports.append(f"{importer} imports {candidate}")
    return original_import(name, globals, locals, fromlist, level)


builtins.__import__ = recording_import
import kvprune

loaded_by_init = sorted(m for m, module in sys.modules.items() if m.startswith("kvprune.harness") and module)
core = []
for package in ("kvprune", "kvprune.engine", "kvprune.models", "kvprune.presses"):
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
        importlib.import_module(module.name)
        core.append(module.name)

sys.path.insert(0, REPO)
import torch
from tests.support.tiny_models import FAMILIES

family = FAMILIES["qwen2_audio"]
model = family.build("sdpa")
inputs = family.inputs([[("text", 3), ("audio", 8), ("text", 4)]])
with torch.no_grad(), kvprune.parse_method("fastv+knorm").build(0.5)(model) as outcome:
    model.generate(**inputs, max_new_tokens=2, do_sample=False, pad_token_id=0)
print(json.dumps(dict(
    forbidden_imports=forbidden_imports, loaded_by_init=loaded_by_init, core=core,
    stats=[[s.audio_tokens, s.kept_tokens] for s in outcome.stats],
    compressed_layers=sorted(outcome.layer_stats),
)))
"""


def test_core_imports_nothing_of_the_harness_and_runs_without_it():
    result = subprocess.run(
        [sys.executable, "-c", f"REPO = {str(REPO)!r}\n{SCRIPT}"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["forbidden_imports"] == []
    assert report["loaded_by_init"] == []
    assert {"kvprune.engine", "kvprune.engine.session", "kvprune.specs", "kvprune.models.loading", "kvprune.models.prompting", "kvprune.presses.dart"} <= set(report["core"])
    assert report["stats"] == [[8, 4]]
    assert report["compressed_layers"] == [1, 2, 3]
