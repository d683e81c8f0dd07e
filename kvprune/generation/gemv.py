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

Two operators and the compiler passes that call them:

* ``grouped_linear``: a custom operator (``kvprune::grouped_linear``) computing ``F.linear(x, w_i, b_i)``
  for several weights that share the input, with the Triton kernels on CUDA up to ``MAX_ROWS`` rows and
  ``F.linear`` otherwise (the CPU, larger batches, no Triton).
* ``gated_linear`` (``kvprune::gated_linear``): a gated MLP's ``silu(x gate^T) * (x up^T)``, both products and
  the activation in one launch of the same kernels, so that the products are never written and read back (the
  7B's FastV 0.9 decode step 6.24 against 6.35-6.36 ms at 64 rows, 5.01-5.02 against 5.08-5.23 at 16, same tokens:
  H200, 2026-12-06); beyond ``MAX_ROWS``, cuBLAS's two products and one pass of the activation over them.
* ``fuse_gates`` and ``group_linears``: compiler passes over the decode step's graph (before autograd:
  ``torch.compile``'s ``pre_grad_custom_pass``) that replace each gated MLP by one ``gated_linear`` call and the
  linear calls reading the same input by one ``grouped_linear`` call.

Nothing in the model changes; the passes apply only to the step kvprune compiles (``step_passes.StepPasses``).
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
#: whether the compiled step's gated MLPs (``silu(gate(x)) * up(x)``) run as one kernel (``gated_linear``)
FUSE_GATES = True
#: the smallest row tile of ``tl.dot`` (tensor-core fragments): fewer rows are padded to it
TILE_ROWS = 16
#: elements a program of the activation's own kernel (``silu_mul_``) takes
SILU_BLOCK = 1024
#: (BLOCK_N, BLOCK_K, warps, stages) the autotuner tries: the matrix-vector kernel's, then the tile kernel's
VECTOR_CONFIGS = [(4, 512, 4, 2), (4, 512, 4, 3), (8, 1024, 8, 2), (8, 1024, 8, 4), (4, 1024, 8, 3), (16, 512, 4, 3)]
TILE_CONFIGS = [(16, 256, 4, 4), (16, 128, 4, 4), (16, 64, 4, 6), (32, 128, 4, 5), (32, 128, 4, 3), (32, 256, 4, 3),
                (64, 128, 4, 4), (64, 64, 4, 4), (32, 64, 4, 4)]


if triton is not None:

    @triton.jit
    def _vector_sums(x_ptr, w_ptr, block, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """Outputs ``block*BLOCK_N ..`` of the one row, in float32: weights streamed once, float32 products and sums."""
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
        return accumulator

    @triton.jit
    def _tile_sums(x_ptr, w_ptr, block, N, K, ROWS, ROWS_P: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr):
        """Outputs ``block*BLOCK_N ..`` of every row, in float32: the rows padded to ``ROWS_P``, weights streamed
        once, tensor-core products."""
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
        return accumulator

    @triton.jit
    def _sums(x_ptr, w_ptr, block, N, K, ROWS, ROWS_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        if ROWS_P == 1:
            accumulator = _vector_sums(x_ptr, w_ptr, block, N, K, BLOCK_N, BLOCK_K)
        else:
            accumulator = _tile_sums(x_ptr, w_ptr, block, N, K, ROWS, ROWS_P, BLOCK_N, BLOCK_K)
        return accumulator

    @triton.jit
    def _store(y_ptr, b_ptr, accumulator, block, N, ROWS, biased, ROWS_P: tl.constexpr, HAS_BIAS: tl.constexpr,
               BLOCK_N: tl.constexpr):
        """``accumulator`` (``_sums``'s shape) into outputs ``block*BLOCK_N ..``, plus the bias where ``HAS_BIAS``
        and ``biased`` (a scalar: whether this program's weight has one)."""
        offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        if ROWS_P == 1:
            if HAS_BIAS:
                accumulator += tl.load(b_ptr + offs_n, mask=in_n & biased, other=0.0).to(tl.float32)
            tl.store(y_ptr + offs_n, accumulator.to(y_ptr.dtype.element_ty), mask=in_n)
        else:
            rows = tl.arange(0, ROWS_P)
            if HAS_BIAS:
                accumulator += tl.load(b_ptr + offs_n, mask=in_n & biased, other=0.0).to(tl.float32)[None, :]
            tl.store(y_ptr + rows[:, None] * N + offs_n[None, :], accumulator.to(y_ptr.dtype.element_ty),
                     mask=(rows < ROWS)[:, None] & in_n[None, :])

    @triton.jit
    def _silu_product(gate, up):
        """``silu(gate) * up`` in float32, rounded once where it is stored (as Inductor fuses the two)."""
        gate = gate.to(tl.float32)
        return gate * tl.sigmoid(gate) * up.to(tl.float32)

    @triton.jit
    def _pick(second, third, first_value, second_value, third_value):
        """Of a weight's three values, the one of the weight a program of ``_grouped_kernel`` takes."""
        return tl.where(third, third_value, tl.where(second, second_value, first_value))

    @triton.jit
    def _grouped_kernel(x_ptr, w0, b0, y0, n0, w1, b1, y1, n1, w2, b2, y2, n2, N_TOTAL, K, ROWS,
                        ROWS_P: tl.constexpr, GROUPS: tl.constexpr, BIAS0: tl.constexpr, BIAS1: tl.constexpr,
                        BIAS2: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr = False,
                        GATED: tl.constexpr = False):
        """Up to three weights' outputs, one program per ``BLOCK_N`` outputs of one of them (``PDL``: launched as a
        dependent, ``dependent_launch``: it waits for the kernel before it, then lets the next one in). ``GATED``:
        ``silu(x w0^T) * (x w1^T)`` into ``y0``, one program per ``BLOCK_N`` outputs of both, each product rounded to
        the output's type first, as the two linear layers would leave them."""
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        pid = tl.program_id(0)
        blocks0 = tl.cdiv(n0, BLOCK_N)
        blocks1 = tl.cdiv(n1, BLOCK_N)
        if GATED:
            gate = _sums(x_ptr, w0, pid, n0, K, ROWS, ROWS_P, BLOCK_N, BLOCK_K).to(y0.dtype.element_ty)
            up = _sums(x_ptr, w1, pid, n0, K, ROWS, ROWS_P, BLOCK_N, BLOCK_K).to(y0.dtype.element_ty)
            _store(y0, b0, _silu_product(gate, up), pid, n0, ROWS, False, ROWS_P, False, BLOCK_N)
        else:
            # The program's weight chosen by value, then one loop for all. A branch per weight gave each branch
            # shared memory of its own, three times one loop's: at 64 rows the q, k, v launch's tuned tiles took
            # 147,456 bytes, one program per multiprocessor where one loop's 49,152 let four in, and it read 1.56 TB/s
            # against the o projection's 2.2 (the 7B's linear layers 5.42 -> 5.24 ms, FastV 0.9's 64-row step 7.70 ->
            # 7.55-7.57; H100, 2026-12-07)
            second = (GROUPS > 1) & (pid >= blocks0)
            third = (GROUPS > 2) & (pid >= blocks0 + blocks1)
            w, b = _pick(second, third, w0, w1, w2), _pick(second, third, b0, b1, b2)
            y, n = _pick(second, third, y0, y1, y2), _pick(second, third, n0, n1, n2)
            biased = _pick(second, third, BIAS0, BIAS1, BIAS2)
            block = pid - tl.where(second, blocks0, 0) - tl.where(third, blocks1, 0)
            accumulator = _sums(x_ptr, w, block, n, K, ROWS, ROWS_P, BLOCK_N, BLOCK_K)
            _store(y, b, accumulator, block, n, ROWS, biased, ROWS_P, BIAS0 or BIAS1 or BIAS2, BLOCK_N)

    @triton.jit
    def _silu_mul_kernel(gate_ptr, up_ptr, n, BLOCK: tl.constexpr):
        """``silu(gate) * up`` into ``gate``, ``BLOCK`` elements a program."""
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        gate = tl.load(gate_ptr + offs, mask=inside)
        up = tl.load(up_ptr + offs, mask=inside)
        tl.store(gate_ptr + offs, _silu_product(gate, up).to(gate_ptr.dtype.element_ty), mask=inside)


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
        _TUNED[rows_p] = triton.autotune(configs=configs, key=["N_TOTAL", "K", "GATED"])(_grouped_kernel)
    return _TUNED[rows_p]


def _kernel_fits(x: torch.Tensor, weights: list[torch.Tensor]) -> bool:
    """Whether the kernels can take this call: CUDA, Triton, up to ``MAX_ROWS`` rows of half-precision input."""
    rows = x.numel() // x.shape[-1]
    return (
        triton is not None and x.is_cuda and 1 <= rows <= MAX_ROWS and len(weights) <= 3
        and x.dtype in (torch.bfloat16, torch.float16) and all(w.dtype == x.dtype and w.is_contiguous() for w in weights)
    )


def _run(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None], gated: bool,
         fallback) -> list[torch.Tensor]:
    """The kernels on ``x`` where they can take it, else ``fallback()`` (``F.linear``: cuBLAS on a GPU)."""
    rows_p = padded_rows(x.numel() // x.shape[-1])
    if not _kernel_fits(x, weights) or (rows_p, x.device.index) in _UNFIT:
        return fallback()
    try:
        outputs = launch(_tuned_kernel(rows_p), x.reshape(-1, x.shape[-1]).contiguous(), weights, biases, gated=gated)
    except triton.runtime.errors.OutOfResources as error:  # every configuration asked more than the card has
        _UNFIT.add((rows_p, x.device.index))
        warnings.warn(f"kvprune: no configuration of the decode linear kernel fits this card's shared memory at {rows_p} "
                      f"rows; cuBLAS takes them ({error})", RuntimeWarning, stacklevel=2)
        return fallback()
    return [y.view(*x.shape[:-1], y.shape[-1]) for y in outputs]


@torch.library.custom_op("kvprune::grouped_linear", mutates_args=())
def grouped_linear(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """``[F.linear(x, w, b) for w, b in zip(weights, biases)]``, in one kernel launch where it pays."""
    return _run(x, weights, biases, False, lambda: [F.linear(x, w, b) for w, b in zip(weights, biases)])


@torch.library.custom_op("kvprune::gated_linear", mutates_args=())
def gated_linear(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``F.silu(F.linear(x, gate)) * F.linear(x, up)`` (a gated MLP's product) in one kernel launch where it pays:
    the two products and the activation without writing and reading back the products."""
    (y,) = _run(x, [gate, up], [None, None], True, lambda: [_silu_times(F.linear(x, gate), F.linear(x, up))])
    return y


def _silu_times(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``F.silu(gate) * up``: on CUDA one pass over both (``silu_mul_``), as the compiled step fuses the two where
    no ``gated_linear`` hides them from it (eager torch's two kernels took 0.9 ms of the 7B's 31.6 ms step at 672
    rows, moving 5/3 the bytes of one pass: H200, 2026-12-06); elsewhere torch's."""
    return silu_mul_(gate, up) if triton is not None and gate.is_cuda and gate.is_contiguous() else F.silu(gate) * up


def silu_mul_(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``gate = silu(gate) * up`` in place, in float32 rounded once (contiguous tensors of one shape)."""
    n = gate.numel()
    _silu_mul_kernel[(triton.cdiv(n, SILU_BLOCK),)](gate, up.contiguous(), n, BLOCK=SILU_BLOCK)
    return gate


@gated_linear.register_fake
def _(x, gate, up):
    return x.new_empty(*x.shape[:-1], gate.shape[0])


def launch(kernel, flat: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
           gated: bool = False, **blocks) -> list[torch.Tensor]:
    """``kernel`` (``_grouped_kernel``, autotuned or given its ``BLOCK_N`` and ``BLOCK_K`` in ``blocks``) on the
    ``(rows, K)`` input ``flat``: one ``(rows, N_i)`` output per weight; ``gated``: one, ``silu(gate) * up`` of the
    two weights'."""
    rows, k = flat.shape
    widths = [w.shape[0] for w in (weights[:1] if gated else weights)]
    outputs = [torch.empty(rows, n, dtype=flat.dtype, device=flat.device) for n in widths]
    targets = outputs * len(weights) if gated else outputs  # gated: both weights' slots name the one output
    # a missing bias's pointer is its output's (never read)
    slots = [(w, y if b is None else b, y, w.shape[0]) for w, b, y in zip(weights, biases, targets)]
    slots += [slots[0]] * (3 - len(slots))  # unused slots repeat the first (never reached)
    arguments = [value for slot in slots for value in slot]
    n_total = sum(y.shape[1] for y in outputs)
    grid = lambda meta: (triton.cdiv(n_total, meta["BLOCK_N"]) if gated else  # noqa: E731
                         sum(triton.cdiv(w.shape[0], meta["BLOCK_N"]) for w in weights),)
    # dependent at every row count: at 16-32 rows the linears alone stream 1 ms slower a step as dependents, yet the
    # whole step is 0.05-0.07 ms faster with them (H100, 2026-12-06: docs/bench/h100_2026-12-06h)
    pdl = launch_options(flat.device)
    kernel[grid](
        flat, *arguments, n_total, k, rows, ROWS_P=padded_rows(rows), GROUPS=len(weights),
        BIAS0=biases[0] is not None, BIAS1=len(biases) > 1 and biases[1] is not None,
        BIAS2=len(biases) > 2 and biases[2] is not None, GATED=gated, **pdl, **blocks,
    )
    return outputs


@grouped_linear.register_fake
def _(x, weights, biases):
    return [x.new_empty(*x.shape[:-1], w.shape[0]) for w in weights]


_LINEAR = (F.linear, torch._C._nn.linear)
_SILU = (F.silu, torch.ops.aten.silu.default)
_MUL = (operator.mul, torch.mul)


def _unbiased_linear(node) -> bool:
    return (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _LINEAR
            and not node.kwargs and (len(node.args) == 2 or node.args[2] is None))


def fuse_gates(graph: torch.fx.Graph) -> None:
    """Replace each ``silu(linear(x, gate)) * linear(x, up)`` of ``graph`` (a gated MLP; products without bias,
    used nowhere else) by one ``gated_linear`` call."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _MUL or len(node.args) != 2 or node.kwargs:
            continue
        for act, up in (node.args, node.args[::-1]):
            if (isinstance(act, torch.fx.Node) and act.target in _SILU and len(act.args) == 1
                    and not act.kwargs.get("inplace", False) and len(act.users) == 1):
                gate = act.args[0]
                if (_unbiased_linear(gate) and _unbiased_linear(up) and gate.args[0] is up.args[0]
                        and len(gate.users) == 1 and len(up.users) == 1):
                    with graph.inserting_before(node):
                        fused = graph.call_function(torch.ops.kvprune.gated_linear.default,
                                                    (gate.args[0], gate.args[1], up.args[1]))
                    node.replace_all_uses_with(fused)
                    for dead in (node, act, gate, up):
                        graph.erase_node(dead)
                    break
    graph.lint()


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

