"""Matrix-vector products for decoding: the decode step reads every weight of the model once per token,
so its speed is how fast the linear layers stream their weights.

At batch 1 cuBLAS reads the 7B decoder's weights at 2.1-2.8 TB/s depending on the shape (H100, 2026-11-26:
2.13 TB/s for a 3584x3584 projection, 0.48 TB/s for the 512-row key and value projections); a plain
Triton kernel that gives each program a few output rows and streams their weights at 2.3-3.1 TB/s, and
the key, value and query projections (and gate and up) that read the same input run as one launch.
Two pieces:

* ``grouped_linear``: a custom operator (``kvprune::grouped_linear``) computing ``F.linear(x, w_i, b_i)``
  for several weights that share the input, with the Triton kernel on CUDA for a few rows (decoding) and
  ``F.linear`` otherwise (the CPU, larger batches, no Triton).
* ``group_linears``: a compiler pass over the decode step's graph (before autograd: ``torch.compile``'s
  ``pre_grad_custom_pass``) that replaces the linear calls reading the same input by one call of it.

Nothing in the model changes; the pass applies only to the step kvprune compiles.
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

#: rows (batch x tokens) up to which the kernel beats cuBLAS; beyond, cuBLAS is used. Measured on the 7B
#: decode step's linear layers (28 layers and the head, 14.14 GB, one CUDA graph; H100, 2026-11-27):
#: 4.90 / 5.56 ms at 1 / 2 rows against cuBLAS's 5.92 / 5.93, but 8.20 at 4 rows (the kernel reduces
#: each row apart). The kernel's row block (``tl.arange(0, ROWS)``) must be a power of two: 3 rows
#: do not compile, so the range stays within 1, 2, 4, ...
MAX_ROWS = 2

try:  # Triton comes with CUDA builds of torch; the CPU build has none
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the torch build
    triton = None


if triton is not None:

    @triton.jit
    def _block(x_ptr, w_ptr, b_ptr, y_ptr, block, N, K, ROWS: tl.constexpr, HAS_BIAS: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """Outputs ``block*BLOCK_N ..`` of every row: weights streamed once, float32 accumulation."""
        offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        w_rows = w_ptr + offs_n[:, None].to(tl.int64) * K
        accumulators = tl.zeros((ROWS, BLOCK_N), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            in_k = offs_k < K
            w = tl.load(w_rows + offs_k[None, :], mask=in_n[:, None] & in_k[None, :], other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            for row in tl.static_range(ROWS):
                x = tl.load(x_ptr + row * K + offs_k, mask=in_k, other=0.0).to(tl.float32)
                partial = tl.sum(w * x[None, :], axis=1)
                accumulators += tl.where(tl.arange(0, ROWS)[:, None] == row, partial[None, :], 0.0)
        if HAS_BIAS:
            accumulators += tl.load(b_ptr + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
        rows = tl.arange(0, ROWS)
        tl.store(y_ptr + rows[:, None] * N + offs_n[None, :], accumulators.to(y_ptr.dtype.element_ty), mask=in_n[None, :])

    @triton.autotune(
        configs=[
            triton.Config(dict(BLOCK_N=n, BLOCK_K=k), num_warps=w, num_stages=s)
            for n, k, w, s in [(4, 512, 4, 2), (4, 512, 4, 3), (8, 1024, 8, 2), (8, 1024, 8, 4), (4, 1024, 8, 3), (16, 512, 4, 3)]
        ],
        key=["N_TOTAL", "K", "ROWS"],
    )
    @triton.jit
    def _grouped_kernel(x_ptr, w0, b0, y0, n0, w1, b1, y1, n1, w2, b2, y2, n2, N_TOTAL, K,
                        ROWS: tl.constexpr, GROUPS: tl.constexpr, BIAS0: tl.constexpr, BIAS1: tl.constexpr,
                        BIAS2: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid = tl.program_id(0)
        blocks0 = tl.cdiv(n0, BLOCK_N)
        blocks1 = tl.cdiv(n1, BLOCK_N)
        if pid < blocks0:
            _block(x_ptr, w0, b0, y0, pid, n0, K, ROWS, BIAS0, BLOCK_N, BLOCK_K)
        elif GROUPS > 1 and pid < blocks0 + blocks1:
            _block(x_ptr, w1, b1, y1, pid - blocks0, n1, K, ROWS, BIAS1, BLOCK_N, BLOCK_K)
        elif GROUPS > 2:
            _block(x_ptr, w2, b2, y2, pid - blocks0 - blocks1, n2, K, ROWS, BIAS2, BLOCK_N, BLOCK_K)


def _kernel_fits(x: torch.Tensor, weights: list[torch.Tensor]) -> bool:
    rows = x.numel() // x.shape[-1]
    return (
        triton is not None and x.is_cuda and 1 <= rows <= MAX_ROWS and len(weights) <= 3
        and x.dtype in (torch.bfloat16, torch.float16) and all(w.dtype == x.dtype and w.is_contiguous() for w in weights)
    )


@torch.library.custom_op("kvprune::grouped_linear", mutates_args=())
def grouped_linear(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """``[F.linear(x, w, b) for w, b in zip(weights, biases)]``, in one kernel launch where it pays."""
    if not _kernel_fits(x, weights):
        return [F.linear(x, w, b) for w, b in zip(weights, biases)]
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    rows, k = flat.shape
    outputs = [torch.empty(rows, w.shape[0], dtype=x.dtype, device=x.device) for w in weights]
    slots = [(w, b, y, w.shape[0]) for w, b, y in zip(weights, biases, outputs)]
    slots += [slots[0]] * (3 - len(slots))  # unused slots repeat the first (never reached)
    arguments = [value if value is not None else slot[0] for slot in slots for value in slot]
    total = sum(w.shape[0] for w in weights)
    grid = lambda meta: (sum(triton.cdiv(w.shape[0], meta["BLOCK_N"]) for w in weights),)  # noqa: E731
    _grouped_kernel[grid](
        flat, *arguments, total, k, ROWS=rows, GROUPS=len(weights),
        BIAS0=biases[0] is not None, BIAS1=len(biases) > 1 and biases[1] is not None,
        BIAS2=len(biases) > 2 and biases[2] is not None,
    )
    return [y.view(*x.shape[:-1], y.shape[-1]) for y in outputs]


@grouped_linear.register_fake
def _(x, weights, biases):
    return [x.new_empty(*x.shape[:-1], w.shape[0]) for w in weights]


_LINEAR = (F.linear, torch._C._nn.linear)


def group_linears(graph: torch.fx.Graph) -> None:
    """Replace the linear calls of ``graph`` by ``grouped_linear`` calls, one per input they read (at
    most three weights per call, in graph order), so that projections of the same hidden states share a launch."""
    by_input: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node.op == "call_function" and node.target in _LINEAR and not node.kwargs:
            by_input.setdefault(node.args[0], []).append(node)
    for linears in by_input.values():
        for start in range(0, len(linears), 3):
            _replace(graph, linears[start : start + 3])
    graph.lint()


def _replace(graph: torch.fx.Graph, linears: list[torch.fx.Node]) -> None:
    x = linears[0].args[0]
    weights = [node.args[1] for node in linears]
    biases = [node.args[2] if len(node.args) > 2 else None for node in linears]
    with graph.inserting_before(linears[0]):
        grouped = graph.call_function(torch.ops.kvprune.grouped_linear.default, (x, weights, biases))
        outputs = [graph.call_function(operator.getitem, (grouped, i)) for i in range(len(linears))]
    for node, output in zip(linears, outputs):
        node.replace_all_uses_with(output)
        graph.erase_node(node)


class GroupLinearsPass:
    """``group_linears`` as an Inductor custom pass (it names itself, so compiled graphs can be cached)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        group_linears(graph)

    def uuid(self) -> str:
        return "kvprune.group_linears.v1"
