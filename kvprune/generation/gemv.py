"""Matrix products for decoding: the decode step reads every weight of the model once per token, and at the
batches decoding runs (one to a few dozen rows) its speed is how fast the linear layers stream their weights.

cuBLAS reads the 7B decoder's 14.14 GB at 2.33-2.39 TB/s at every row count from 1 to 64 (5.90-6.06 ms; H100,
2026-11-27; 0.48 TB/s for the 512-row key and value projections alone at one row). Two Triton kernels stream
them faster, each program taking a few output rows of the weights, with the query, key and value projections
(and gate and up) that read the same input in one launch:

* one row: a matrix-vector kernel, float32 products and sums (4.88 ms, 2.89 TB/s);
* 2 to ``MAX_ROWS`` rows: the rows padded to a tensor-core tile of at least 16 and multiplied with ``tl.dot``, so
  that the arithmetic per weight byte stays small as the rows grow (5.14-5.22 ms at 2-16 rows, 5.33 at 32, 5.73
  at 48, 5.86 at 64; slower than cuBLAS from 96 rows on, 8.16 against 6.13 ms).

Two pieces:

* ``grouped_linear``: a custom operator (``kvprune::grouped_linear``) computing ``F.linear(x, w_i, b_i)``
  for several weights that share the input, with the Triton kernels on CUDA up to ``MAX_ROWS`` rows and
  ``F.linear`` otherwise (the CPU, larger batches, no Triton).
* ``group_linears``: a compiler pass over the decode step's graph (before autograd: ``torch.compile``'s
  ``pre_grad_custom_pass``) that replaces the linear calls reading the same input by one call of it.

Nothing in the model changes; the pass applies only to the step kvprune compiles.
"""

from __future__ import annotations

import operator
import warnings

import torch
import torch.nn.functional as F

from .dependent_launch import launch_options
from .triton_support import tl, triton

#: rows (batch x tokens) up to which the kernels beat cuBLAS; beyond, cuBLAS is used (measured on the 7B decode
#: step's linear layers, 28 layers and the head in one CUDA graph, at 1-128 rows: the module's docstring)
MAX_ROWS = 64
#: the smallest row tile of ``tl.dot`` (tensor-core fragments): fewer rows are padded to it
TILE_ROWS = 16
#: (BLOCK_N, BLOCK_K, warps, stages) the autotuner tries: the matrix-vector kernel's, then the tile kernel's
VECTOR_CONFIGS = [(4, 512, 4, 2), (4, 512, 4, 3), (8, 1024, 8, 2), (8, 1024, 8, 4), (4, 1024, 8, 3), (16, 512, 4, 3)]
TILE_CONFIGS = [(16, 256, 4, 4), (16, 128, 4, 4), (16, 64, 4, 6), (32, 128, 4, 5), (32, 128, 4, 3), (32, 256, 4, 3),
                (64, 128, 4, 4), (64, 64, 4, 4), (32, 64, 4, 4)]


if triton is not None:

    @triton.jit
    def _vector_block(x_ptr, w_ptr, b_ptr, y_ptr, block, N, K, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
        """Outputs ``block*BLOCK_N ..`` of the one row: weights streamed once, float32 products and sums."""
        offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        w_rows = w_ptr + offs_n[:, None].to(tl.int64) * K
        accumulator = tl.zeros((BLOCK_N,), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            in_k = offs_k < K
            w = tl.load(w_rows + offs_k[None, :], mask=in_n[:, None] & in_k[None, :], other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            x = tl.load(x_ptr + offs_k, mask=in_k, other=0.0).to(tl.float32)
            accumulator += tl.sum(w * x[None, :], axis=1)
        if HAS_BIAS:
            accumulator += tl.load(b_ptr + offs_n, mask=in_n, other=0.0).to(tl.float32)
        tl.store(y_ptr + offs_n, accumulator.to(y_ptr.dtype.element_ty), mask=in_n)

    @triton.jit
    def _tile_block(x_ptr, w_ptr, b_ptr, y_ptr, block, N, K, ROWS, ROWS_P: tl.constexpr, HAS_BIAS: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """Outputs ``block*BLOCK_N ..`` of every row: the rows padded to ``ROWS_P``, weights streamed once,
        tensor-core products accumulated in float32."""
        offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        rows = tl.arange(0, ROWS_P)
        in_rows = rows < ROWS
        w_rows = w_ptr + offs_n[:, None].to(tl.int64) * K
        accumulator = tl.zeros((ROWS_P, BLOCK_N), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            in_k = offs_k < K
            w = tl.load(w_rows + offs_k[None, :], mask=in_n[:, None] & in_k[None, :], other=0.0,
                        eviction_policy="evict_first")
            x = tl.load(x_ptr + rows[:, None] * K + offs_k[None, :], mask=in_rows[:, None] & in_k[None, :], other=0.0)
            accumulator = tl.dot(x, tl.trans(w), accumulator)
        if HAS_BIAS:
            accumulator += tl.load(b_ptr + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rows[:, None] * N + offs_n[None, :], accumulator.to(y_ptr.dtype.element_ty),
                 mask=in_rows[:, None] & in_n[None, :])

    @triton.jit
    def _block(x_ptr, w_ptr, b_ptr, y_ptr, block, N, K, ROWS, ROWS_P: tl.constexpr, HAS_BIAS: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        if ROWS_P == 1:
            _vector_block(x_ptr, w_ptr, b_ptr, y_ptr, block, N, K, HAS_BIAS, BLOCK_N, BLOCK_K)
        else:
            _tile_block(x_ptr, w_ptr, b_ptr, y_ptr, block, N, K, ROWS, ROWS_P, HAS_BIAS, BLOCK_N, BLOCK_K)

    @triton.jit
    def _grouped_kernel(x_ptr, w0, b0, y0, n0, w1, b1, y1, n1, w2, b2, y2, n2, N_TOTAL, K, ROWS,
                        ROWS_P: tl.constexpr, GROUPS: tl.constexpr, BIAS0: tl.constexpr, BIAS1: tl.constexpr,
                        BIAS2: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
        """Up to three weights' outputs, one program per ``BLOCK_N`` outputs of one of them (``PDL``: launched as a
        dependent, ``dependent_launch``: it waits for the kernel before it, then lets the next one in)."""
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        pid = tl.program_id(0)
        blocks0 = tl.cdiv(n0, BLOCK_N)
        blocks1 = tl.cdiv(n1, BLOCK_N)
        if pid < blocks0:
            _block(x_ptr, w0, b0, y0, pid, n0, K, ROWS, ROWS_P, BIAS0, BLOCK_N, BLOCK_K)
        elif GROUPS > 1 and pid < blocks0 + blocks1:
            _block(x_ptr, w1, b1, y1, pid - blocks0, n1, K, ROWS, ROWS_P, BIAS1, BLOCK_N, BLOCK_K)
        elif GROUPS > 2:
            _block(x_ptr, w2, b2, y2, pid - blocks0 - blocks1, n2, K, ROWS, ROWS_P, BIAS2, BLOCK_N, BLOCK_K)


_TUNED: dict[int, object] = {}  # padded rows -> the grouped kernel autotuned over that row block's configurations
_UNFIT: set[tuple[int, int]] = set()  # (padded rows, device index) where no configuration fits the card's shared memory


def padded_rows(rows: int) -> int:
    """The kernel's row block: 1 (the matrix-vector kernel), else a power of two of at least ``TILE_ROWS``
    (``tl.arange`` and ``tl.dot`` take powers of two only)."""
    return 1 if rows == 1 else max(TILE_ROWS, 1 << (rows - 1).bit_length())


def _tuned_kernel(rows_p: int):
    """The grouped kernel autotuned per weight shape. Which configurations fit a card's shared memory is Triton's
    to say (its requirement for one configuration differs between versions by up to 1.5x): the autotuner
    skips those that run out, and ``grouped_linear`` takes ``F.linear`` where none fits."""
    if rows_p not in _TUNED:
        configs = [triton.Config(dict(BLOCK_N=n, BLOCK_K=k), num_warps=w, num_stages=s)
                   for n, k, w, s in (VECTOR_CONFIGS if rows_p == 1 else TILE_CONFIGS)]
        _TUNED[rows_p] = triton.autotune(configs=configs, key=["N_TOTAL", "K"])(_grouped_kernel)
    return _TUNED[rows_p]


def _kernel_fits(x: torch.Tensor, weights: list[torch.Tensor]) -> bool:
    """Whether the kernels can take this call: CUDA, Triton, up to ``MAX_ROWS`` rows of half-precision input."""
    rows = x.numel() // x.shape[-1]
    return (
        triton is not None and x.is_cuda and 1 <= rows <= MAX_ROWS and len(weights) <= 3
        and x.dtype in (torch.bfloat16, torch.float16) and all(w.dtype == x.dtype and w.is_contiguous() for w in weights)
    )


@torch.library.custom_op("kvprune::grouped_linear", mutates_args=())
def grouped_linear(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """``[F.linear(x, w, b) for w, b in zip(weights, biases)]``, in one kernel launch where it pays."""
    rows_p = padded_rows(x.numel() // x.shape[-1])
    if not _kernel_fits(x, weights) or (rows_p, x.device.index) in _UNFIT:
        return [F.linear(x, w, b) for w, b in zip(weights, biases)]
    try:
        outputs = launch(_tuned_kernel(rows_p), x.reshape(-1, x.shape[-1]).contiguous(), weights, biases)
    except triton.runtime.errors.OutOfResources as error:  # every configuration asked more than the card has
        _UNFIT.add((rows_p, x.device.index))
        warnings.warn(f"kvprune: no configuration of the decode linear kernel fits this card's shared memory at {rows_p} "
                      f"rows; cuBLAS takes them ({error})", RuntimeWarning, stacklevel=2)
        return [F.linear(x, w, b) for w, b in zip(weights, biases)]
    return [y.view(*x.shape[:-1], y.shape[-1]) for y in outputs]


def launch(kernel, flat: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
           **blocks) -> list[torch.Tensor]:
    """``kernel`` (``_grouped_kernel``, autotuned or given its ``BLOCK_N`` and ``BLOCK_K`` in ``blocks``) on the
    ``(rows, K)`` input ``flat``: one ``(rows, N_i)`` output per weight."""
    rows, k = flat.shape
    outputs = [torch.empty(rows, w.shape[0], dtype=flat.dtype, device=flat.device) for w in weights]
    slots = [(w, b, y, w.shape[0]) for w, b, y in zip(weights, biases, outputs)]
    slots += [slots[0]] * (3 - len(slots))  # unused slots repeat the first (never reached)
    arguments = [value if value is not None else slot[0] for slot in slots for value in slot]
    grid = lambda meta: (sum(triton.cdiv(w.shape[0], meta["BLOCK_N"]) for w in weights),)  # noqa: E731
    # dependent at every row count: at 16-32 rows the linears alone stream 1 ms slower a step as dependents, yet the
    # whole step is 0.05-0.07 ms faster with them (H100, 2026-12-06: docs/bench/h100_2026-12-06h)
    pdl = launch_options(flat.device)
    kernel[grid](
        flat, *arguments, sum(w.shape[0] for w in weights), k, rows, ROWS_P=padded_rows(rows), GROUPS=len(weights),
        BIAS0=biases[0] is not None, BIAS1=len(biases) > 1 and biases[1] is not None,
        BIAS2=len(biases) > 2 and biases[2] is not None, **pdl, **blocks,
    )
    return outputs


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
