"""Decode attention's read rate at large batches: flash_decode alone over distinct caches, launch variants
(``--boundary``: just beyond one wave, the default tiles against 64-slot ones; ``--ncu ROWS LENGTH USED``: one case)."""
import sys, json, torch
from kvprune.generation import decode_attention as A

torch.manual_seed(0)
dev = torch.device("cuda")
HEADS, KV, D = 28, 4, 128

def caches(rows, length, count):
    out = []
    for _ in range(count):
        k = torch.randn(rows, KV, length, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        out.append((k, v))
    return out

def rate(rows, length, used, count, variant, reps=None):
    reps = reps or max(10, count)
    cs = caches(rows, length, count)
    q = torch.randn(rows, HEADS, 1, D, device=dev, dtype=torch.bfloat16)
    mask = torch.zeros(rows, 1, 1, length, device=dev, dtype=torch.bool); mask[..., :used] = True
    last = torch.full((rows,), used - 1, device=dev, dtype=torch.long)
    saved = {k: getattr(A, k) for k in variant.get("attrs", {})}
    for k, v in variant.get("attrs", {}).items(): setattr(A, k, v)
    kw = variant.get("kw", {})
    try:
        call = lambda k, v: A.flash_decode(q, k, v, mask, D ** -0.5, last, **kw)
        for k, v in cs: call(k, v)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(reps): call(*cs[i % count])
        graph.replay(); torch.cuda.synchronize()
        best = 1e9
        for _ in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); graph.replay(); e.record(); torch.cuda.synchronize()
            best = min(best, s.elapsed_time(e) / reps)
    finally:
        for k, v in saved.items(): setattr(A, k, v)
    read = rows * KV * used * D * 2 * 2
    del cs; torch.cuda.empty_cache()
    return best, read / (best * 1e-3) / 1e12

def copy_rate():
    n = (2 << 30) // 4
    s = torch.randn(n, device=dev); t = torch.empty_like(s)
    t.copy_(s); torch.cuda.synchronize()
    best = 1e9
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); t.copy_(s); b.record(); torch.cuda.synchronize(); best = min(best, a.elapsed_time(b))
    return 2 * 4 * n / (best * 1e-3) / 1e12

if "--ncu" in sys.argv:
    rows, length, used = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    print(rate(rows, length, used, 2, {}, reps=2)); sys.exit()

VARIANTS = {
    "default": {},
    "b128s2": {"kw": {"block": 128, "stages": 2}},
    "b128s3": {"kw": {"block": 128, "stages": 3}},
    "b128s2w8": {"kw": {"block": 128, "stages": 2, "warps": 8}},
    "b256s1": {"kw": {"block": 256, "stages": 1, "warps": 8}},
}
CASES = [(818, 896, 842, 3), (818, 7616, 7586, 2), (1344, 896, 842, 2), (146, 7616, 7586, 4), (64, 896, 836, 26), (64, 7616, 7586, 2), (16, 7616, 7586, 8), (1, 7616, 7586, 64), (1, 896, 836, 64)]
if "--boundary" in sys.argv:  # just beyond one wave: the tiles default_block picks against the 64-slot ones
    VARIANTS = {"default": {}, "narrow": {"kw": {"block": 64, "stages": 3}}}
    CASES = [(rows, 896, 842, 8) for rows in (68, 96, 128, 146, 200, 264, 400)] + [(rows, 7616, 7586, 2) for rows in (68, 96, 200)]
print(json.dumps({"copy_tb_s": round(copy_rate(), 3), "card": torch.cuda.get_device_name()}))
for rows, length, used, count in CASES:
    if rows * KV * length * D * 4 * count > 40e9: count = max(1, int(40e9 // (rows * KV * length * D * 4)))
    for name, variant in VARIANTS.items():
        try:
            ms, tbs = rate(rows, length, used, count, variant)
            print(json.dumps({"rows": rows, "slots": used, "variant": name, "ms": round(ms, 4), "tb_s": round(tbs, 3)}))
        except Exception as e:
            print(json.dumps({"rows": rows, "slots": used, "variant": name, "error": str(e)[:200]}))
