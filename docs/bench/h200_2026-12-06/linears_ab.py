"""scripts/bench_decode_linears.py with the tile kernel's weights loaded by TMA or by the threads, alternated in one
process (the autotuner's picks cleared and recorded per round). Usage: linears_tma.py ROWS BUDGET_S."""
import json, os, sys, time
from pathlib import Path
from kvprune.generation import gemv

sys.path.insert(0, "scripts")
import bench_decode_linears as bench  # noqa: E402

OUT = Path(os.environ["OUT"])
rows, budget = sys.argv[1], float(sys.argv[2])
start = time.time()
with open(OUT / "linears_tma.jsonl", "a") as log:
    for i, tma in enumerate([False, True, False, True, False, True]):
        if time.time() - start > budget:
            print("budget reached before round", i, flush=True)
            break
        gemv.TMA_WEIGHTS = tma
        gemv._TUNED.clear()
        t0 = time.time()
        try:
            results = bench.main(["--rows", rows, "--out", str(OUT / f"linears_{i}")])
        except Exception as error:
            print(json.dumps(dict(round=i, tma=tma, error=repr(error)[:1500])), flush=True)
            continue
        picks = {str(key): {str(shape[:2]): str(config) for shape, config in kernel.cache.items()}
                 for key, kernel in gemv._TUNED.items()}
        row = dict(round=i, tma=tma, s=round(time.time() - t0), picks=picks,
                   results=[r for r in results if r["variant"] == "kvprune"],
                   cublas=[r for r in results if r["variant"] == "cublas"])
        print(json.dumps(dict(round=i, tma=tma, s=row["s"], ms={r["rows"]: round(r["ms"], 3) for r in row["results"]},
                              err={r["rows"]: round(r["max_rel_err"], 5) for r in row["results"]},
                              cublas={r["rows"]: round(r["ms"], 3) for r in row["cublas"]})), flush=True)
        log.write(json.dumps(row) + "\n")
        log.flush()
