"""The 7B decoder's linear layers at large batches: cuBLAS against cuBLASLt (torch.backends.cuda.preferred_blas_library)
and cuBLAS with an SM carveout, each shape's F.linear in one CUDA graph (28 layers' worth replayed as 4 shapes x 7)."""
import sys
import torch
import torch.nn.functional as F

SHAPES = dict(qkv=(4608, 3584, True), o=(3584, 3584, False), gate_up=(37888, 3584, False), down=(3584, 18944, False))
HEAD = (152064, 3584, False)


def timed(fn, replays=10):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    g.replay(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        a.record()
        for _ in range(replays):
            g.replay()
        b.record(); torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / replays)
    return best, out


def main():
    rows_list = [int(r) for r in (sys.argv[1] if len(sys.argv) > 1 else "143,261,392,784,804,1400").split(",")]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    weights = {n: (torch.randn(o, i, device="cuda", dtype=torch.bfloat16) * i ** -0.5,
                   torch.randn(o, device="cuda", dtype=torch.bfloat16) if bias else None) for n, (o, i, bias) in SHAPES.items()}
    weights["head"] = (torch.randn(HEAD[0], HEAD[1], device="cuda", dtype=torch.bfloat16) * 0.02, None)
    print("| rows | shape | cublas ms | cublaslt ms | carveout 66 ms | cublas TFLOP/s | lt / cublas | max abs diff lt |")
    print("|---|---|---|---|---|---|---|---|")
    for rows in rows_list:
        totals = [0.0, 0.0, 0.0]; flops_total = 0
        for name, (w, b) in weights.items():
            x = torch.randn(rows, w.shape[1], device="cuda", dtype=torch.bfloat16)
            times, outs = [], []
            for variant in ("cublas", "cublaslt", "carve"):
                torch.backends.cuda.preferred_blas_library("cublaslt" if variant == "cublaslt" else "cublas")
                torch._C._set_sm_carveout_experimental(66 if variant == "carve" else None)
                try:
                    t, out = timed(lambda: F.linear(x, w, b))
                finally:
                    torch._C._set_sm_carveout_experimental(None)
                    torch.backends.cuda.preferred_blas_library("cublas")
                times.append(t); outs.append(out.clone())
            flops = 2 * rows * w.shape[0] * w.shape[1]
            reps = 1 if name == "head" else 28
            flops_total += flops * reps
            for i in range(3):
                totals[i] += times[i] * reps
            diff = (outs[1].float() - outs[0].float()).abs().max().item()
            print(f"| {rows} | {name} | {times[0]:.4f} | {times[1]:.4f} | {times[2]:.4f} | {flops / times[0] / 1e9:.0f} | "
                  f"{times[1] / times[0]:.3f} | {diff:.3g} |", flush=True)
        print(f"| {rows} | **28 layers + head** | {totals[0]:.3f} | {totals[1]:.3f} | {totals[2]:.3f} | "
              f"{flops_total / totals[0] / 1e9:.0f} | {totals[1] / totals[0]:.3f} | |", flush=True)


main()
