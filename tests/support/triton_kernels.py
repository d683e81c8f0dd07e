"""Triton kernels compiled for an H100 (sm_90) on a machine without one: what their shared memory and code
would be on the card, checked on the CPU where Triton is installed."""

from __future__ import annotations

H100_SHARED_BYTES = 232_448  # the shared memory a block may opt into on an H100 (and an H200)


def compile_for_h100(kernel, pointers: dict, constants: dict, *, warps: int, stages: int, aligned=(), floats=()):
    """``kernel`` (a ``triton.jit`` function) compiled for sm_90: ``pointers`` and ``constants`` by argument name,
    ``floats`` 32-bit floats, other arguments 32-bit integers; ``aligned`` (and every pointer) divisible by 16,
    as Triton specialises them at the real shapes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = kernel.arg_names
    signature = {n: pointers.get(n, "constexpr" if n in constants else "fp32" if n in floats else "i32") for n in names}
    divisible = [n for n in names if (n in pointers or n in aligned) and n not in constants]
    source = ASTSource(fn=kernel, signature=signature, constexprs={(names.index(n),): v for n, v in constants.items()},
                       attrs={(names.index(n),): [["tt.divisibility", 16]] for n in divisible})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})


def compile_linear_for_h100(rows_p: int, config: tuple[int, int, int, int], *, gated: bool = False, pdl: bool = False,
                            groups: int = 3):
    """``gemv._grouped_kernel`` at one row block and ``(BLOCK_N, BLOCK_K, warps, stages)``, compiled for sm_90:
    ``groups`` weights with biases (three: q, k and v), or (``gated``) the gated MLP's two without; ``pdl``: as a
    dependent launch."""
    from kvprune.generation import gemv

    block_n, block_k, warps, stages = config
    pointers = dict.fromkeys(["x_ptr", "w0", "b0", "y0", "w1", "b1", "y1", "w2", "b2", "y2"], "*bf16")
    constants = dict(ROWS_P=rows_p, GROUPS=2 if gated else groups, BIAS0=not gated, BIAS1=not gated, BIAS2=not gated,
                     BLOCK_N=block_n, BLOCK_K=block_k, PDL=pdl, GATED=gated)
    return compile_for_h100(gemv._grouped_kernel, pointers, constants, warps=warps, stages=stages,
                            aligned=("n0", "n1", "n2", "N_TOTAL", "K"))
