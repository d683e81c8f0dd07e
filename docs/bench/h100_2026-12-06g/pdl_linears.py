"""scripts/bench_decode_linears.py with the linear kernels launched as dependents (PDL) at every row block or at none,
alternated in one process (the autotuner's picks cleared and printed per round). Usage: pdl_linears.py ROWS [ROUNDS];
ROUNDS: comma-separated 1 (dependent) or 0 (usual), "1,0,1,0,1,0" by default. Writes $OUT/pdl_linears.jsonl."""
import json
import os
import sys
import time
from pathlib import Path

from kvprune.generation import dependent_launch, gemv

sys.path.insert(0, "scripts")
import bench_decode_linears as bench  # noqa: E402

OUT = Path(os.environ["OUT"])
rows = sys.argv[1]
rounds = [flag == "1" for flag in (sys.argv[2] if len(sys.argv) > 2 else "1,0,1,0,1,0").split(",")]
gemv.DEPENDENT_ROW_BLOCKS = (1, 16, 32, 64)
with open(OUT / "pdl_linears.jsonl", "a") as log:
    for i, dependent in enumerate(rounds):
        dependent_launch.ENABLED = dependent
        gemv._TUNED.clear()
        t0 = time.time()
        results = bench.main(["--rows", rows, "--out", str(OUT / f"linears_{i}")])
        picks = {str(key): {str(shape[:2]): str(config) for shape, config in kernel.cache.items()}
                 for key, kernel in gemv._TUNED.items()}
        row = dict(round=i, pdl=dependent, s=round(time.time() - t0), picks=picks,
                   results=[r for r in results if r["variant"] == "kvprune"],
                   cublas=[r for r in results if r["variant"] == "cublas"])
        print(json.dumps(dict(round=i, pdl=dependent, ms={r["rows"]: round(r["ms"], 3) for r in row["results"]})), flush=True)
        log.write(json.dumps(row) + "\n")
        log.flush()
