"""Where one Whisper-large encoder layer's time goes on a GPU, and what fusing its elementwise work buys:
the bound behind the Whisper-style encoders' speedup (Voxtral, Aero-1, Audio Flamingo 3, Qwen2-Audio).

    python scripts/bench_encoder_layer.py --out "$OUT"        # one GPU, about 2 minutes (max-autotune: 2 of them)

One layer at 300 s of audio (10 windows x 1,500 frames, width 1,280, 20 heads, fc 5,120, bf16, random
weights) is timed (the bench's ``Meter``: CUDA events, the median of 30 calls after 5 warm-up calls) as kvprune's fast encoder computes
it (``kvprune.encoders.whisper.encoder_layer``), uncompiled and compiled (the fast path's default), and
compiled with Inductor's max-autotune (Triton GEMM templates, epilogues fused); then a hand-fused variant
(fc1's GELU in cuBLASLt's epilogue, tanh GELU; the residuals as the GEMMs' C input); then its parts alone:
the six matrix products, and the attention on each SDPA kernel. Each variant's largest difference from the
uncompiled layer is given relative to its largest value. The card's GEMM rate is the bench's (``roofline.gemm_tflops``).
Writes encoder_layer.json to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from kvprune.encoders.compiled import Norm
from kvprune.encoders.whisper import LayerWeights, encoder_layer
from kvprune.harness.bench.measure import Meter
from kvprune.harness.bench.roofline import gemm_tflops

WIDTH, HEADS, FC, WINDOWS, FRAMES = 1280, 20, 5120, 10, 1500
SCALING = (WIDTH // HEADS) ** -0.5


def weights(device: str, dtype: torch.dtype) -> LayerWeights:
    def tensor(*shape, scale=0.02):
        return (torch.randn(*shape, device=device) * scale).to(dtype)

    def layer_norm() -> Norm:
        return Norm(1 + tensor(WIDTH, scale=0.1), tensor(WIDTH), 1e-5)

    square = lambda bias: (tensor(WIDTH, WIDTH), tensor(WIDTH) if bias else None)  # noqa: E731
    return LayerWeights(layer_norm(), square(True), square(False), square(True), square(True), layer_norm(),
                        (tensor(FC, WIDTH), tensor(FC)), (tensor(WIDTH, FC), tensor(WIDTH)))


def fused_layer(hidden: torch.Tensor, w: LayerWeights) -> torch.Tensor:
    """The layer with fc1's GELU in cuBLASLt's epilogue (the tanh approximation) and each residual added
    by its GEMM (addmm with the residual plus bias as input)."""
    batch, frames, width = hidden.shape
    rows = hidden.reshape(batch * frames, width)
    x = F.layer_norm(rows, (width,), *w.attention_norm)
    q = (F.linear(x, *w.q) * SCALING).view(batch, frames, HEADS, -1).transpose(1, 2)
    k, v = (F.linear(x, *p).view(batch, frames, HEADS, -1).transpose(1, 2) for p in (w.k, w.v))
    attended = F.scaled_dot_product_attention(q, k, v, scale=1.0).transpose(1, 2).reshape(batch * frames, width)
    rows = torch.addmm(rows + w.out[1], attended, w.out[0].t())
    x = F.layer_norm(rows, (width,), *w.final_norm)
    x = torch._addmm_activation(w.fc1[1], x, w.fc1[0].t(), use_gelu=True)
    return torch.addmm(rows + w.fc2[1], x, w.fc2[0].t()).view(batch, frames, width)


def relative(out: torch.Tensor, reference: torch.Tensor) -> float:
    return ((out.float() - reference.float()).abs().max() / reference.float().abs().max()).item()


def timed_compile(fn, *args) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    out = fn(*args)
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    torch.manual_seed(0)
    device, dtype = "cuda", torch.bfloat16
    median_ms = Meter(torch.device(device), 5, 30).median_ms  # the bench's timing: median of 30 after 5
    w = weights(device, dtype)
    hidden = torch.randn(WINDOWS, FRAMES, WIDTH, device=device, dtype=dtype)
    layer = lambda fn: (lambda: fn(hidden, None, w, HEADS, SCALING, "gelu"))  # noqa: E731
    reference = layer(encoder_layer)()
    result: dict[str, object] = dict(card=torch.cuda.get_device_name(), torch=torch.__version__)
    result["uncompiled_ms"] = median_ms(layer(encoder_layer))
    for name, mode in (("compiled", None), ("autotune", "max-autotune-no-cudagraphs")):
        torch._dynamo.reset()
        compiled = torch.compile(encoder_layer, fullgraph=True, mode=mode)
        out, result[f"{name}_compile_s"] = timed_compile(layer(compiled))
        result[f"{name}_ms"], result[f"{name}_rel_diff"] = median_ms(layer(compiled)), relative(out, reference)
    result["fused_ms"] = median_ms(lambda: fused_layer(hidden, w))
    result["fused_rel_diff"] = relative(fused_layer(hidden, w), reference)
    torch._dynamo.reset()
    fused = torch.compile(fused_layer, fullgraph=True)
    out, result["fused_compiled_compile_s"] = timed_compile(fused, hidden, w)
    result["fused_compiled_ms"], result["fused_compiled_rel_diff"] = median_ms(lambda: fused(hidden, w)), relative(out, reference)

    rows, wide = hidden.reshape(-1, WIDTH), torch.randn(WINDOWS * FRAMES, FC, device=device, dtype=dtype)

    def matrix_products():
        for p in (w.q, w.k, w.v, w.out, w.fc1):
            F.linear(rows, *p)
        F.linear(wide, *w.fc2)

    result["matrix_products_ms"] = median_ms(matrix_products)
    q = torch.randn(WINDOWS, HEADS, FRAMES, WIDTH // HEADS, device=device, dtype=dtype)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    result["attention_default_ms"] = median_ms(lambda: F.scaled_dot_product_attention(q, q, q))
    for kernel in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        with sdpa_kernel([getattr(SDPBackend, kernel)]):
            result[f"attention_{kernel.lower()}_ms"] = median_ms(lambda: F.scaled_dot_product_attention(q, q, q))
    tokens = WINDOWS * FRAMES
    result["tflop_per_layer"] = (2 * tokens * (4 * WIDTH * WIDTH + 2 * WIDTH * FC) + 4 * tokens * FRAMES * WIDTH) / 1e12
    result["gemm_tflops"] = gemm_tflops(Meter(torch.device(device), 0, 1), dtype)
    for key, value in result.items():
        print(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "encoder_layer.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
