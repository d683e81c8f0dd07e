"""The decode attention at batches beyond one wave of (row, key-value head) programs: splits 1..6 forced, each
row's last slot given (the engine's path), bf16, the 7B's heads; microseconds per call (CUDA-graph replays)."""
import json, os, sys
sys.path.insert(0, "scripts")
import torch
import check_decode_attention as check
from kvprune.generation import decode_attention as fused

OUT = os.environ.get("OUT", ".")
setup = check.gpu_setup()._replace(min_sets=2, replays=15)
rule = fused.split_aim
shapes = [(128, 7700), (132, 7700), (139, 7700), (146, 7700), (170, 7700), (200, 7700), (264, 7700),
          (743, 7700), (784, 7700), (784, 1024), (242, 7700)]
with open(f"{OUT}/tail_splits.jsonl", "w") as log:
    for rows, slots in shapes:
        sets = check.input_sets(setup, rows, slots, False)
        last = torch.full((rows,), slots - 1, dtype=torch.long, device="cuda")
        row = dict(rows=rows, slots=slots, sets=len(sets), rule=rule(rows, 4, 132),
                   kv_gb=2 * rows * 4 * slots * 128 * 2 / 1e9)
        outs = {}
        for splits in (1, 2, 3, 4, 6):
            fused.split_aim = lambda b, h, p, s=splits: s
            fn = lambda q, k, v, m, sc: fused.flash_decode(q, k, v, m, sc, last)
            row[f"us_{splits}"] = round(check.time_per_call(setup, fn, sets), 1)
        fused.split_aim = rule
        print(json.dumps(row), flush=True)
        log.write(json.dumps(row) + "\n")
        del sets
        torch.cuda.empty_cache()
