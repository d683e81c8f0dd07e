"""Scratch: the tile kernel at 32/64 rows with its configurations and with wider BLOCK_N ones added."""
import json, os, sys, time
from functools import partial
import torch
sys.path.insert(0, "scripts")
import bench_decode_linears as b
from kvprune.generation import gemv
from kvprune.harness.bench.measure import Meter
from kvprune.harness.bench.presets import PRESETS
T0 = time.time()
OUT = os.environ["OUT"]
WIDE = [(128, 64, 8, 3), (128, 128, 8, 3), (256, 64, 8, 3), (128, 64, 4, 4)]
OLD = list(gemv.TILE_CONFIGS)
meter = Meter(torch.device("cuda"), warmup=0, repeats=9)
gemv.MAX_ROWS = 64
torch.manual_seed(0)
text = PRESETS.get("qwen2.5-omni-7b").config().get_text_config()
layers = [b.layer_weights(text, "cuda", torch.bfloat16) for _ in range(text.num_hidden_layers)]
head = ([torch.randn(text.vocab_size, text.hidden_size, device="cuda", dtype=torch.bfloat16) * 0.02], [None])
print(f"built {time.time()-T0:.0f} s", flush=True)
f = open(os.path.join(OUT, "wide.jsonl"), "w")
for rows in (64, 32):
    inputs = {w: torch.randn(rows, w, device="cuda", dtype=torch.bfloat16) for w in (3584, 18944)}
    for name, configs in (("cublas", None), ("old", OLD), ("wide", OLD + WIDE)):
        if time.time() - T0 > 75:
            break
        if configs is not None:
            gemv.TILE_CONFIGS = configs
            gemv._TUNED.clear()
        fn = b.cublas if configs is None else b.kvprune_kernels
        ms = b.time_step_ms(meter, partial(b.run_step, fn, layers, head, inputs))
        chosen = {str(k): str(v) for k, v in getattr(gemv._TUNED[64 if rows > 32 else 32], "cache", {}).items()} if configs else {}
        row = dict(rows=rows, variant=name, ms=ms, err=b.largest_error(fn, layers[0], inputs), chosen=chosen, t=time.time() - T0)
        print(json.dumps(row), flush=True); f.write(json.dumps(row) + "\n"); f.flush()
