"""The compiler passes over the decode step's graph (``torch.compile``'s ``pre_grad_custom_pass``, before
autograd), as one object that names its settings so that compiled graphs can be cached: the rotary tables stored
once a step (``realize_rotary``) and, with ``fast_linear``, ``gemv``'s gated MLPs and grouped linear layers."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import gemv

#: whether the step stores its rotary tables once (``realize_rotary``) rather than every layer recomputing them
REALIZE_ROTARY = True

_TABLES = {torch.cos, torch.sin, torch.ops.aten.cos.default, torch.ops.aten.sin.default}


@torch.library.custom_op("kvprune::realized", mutates_args=())
def realized(x: torch.Tensor) -> torch.Tensor:
    """``x``, copied: an operator Inductor cannot see into, so what computes ``x`` runs once into a buffer."""
    return x.clone()


@realized.register_fake
def _(x):
    return torch.empty_like(x)


def _is_table(node: torch.fx.Node) -> bool:
    return (node.op == "call_function" and node.target in _TABLES) or (node.op == "call_method" and node.target in ("cos", "sin"))


def realize_rotary(graph: torch.fx.Graph) -> None:
    """Store each cos and sin of ``graph`` (the rotary embedding's tables, a few values a row) before their users.
    Inductor inlines a pointwise value that reads few inputs into every consumer, however many: the 7B's step
    recomputed both tables in each of its 28 layers for every element of the queries and keys (a kernel with cos and
    sin in it, 28 launches, 0.18 ms of FastV 0.9's 64-row step on an H100, 0.58 ms at 672 rows on an H200); stored,
    that step took 2% less on an H100."""
    for node in list(graph.nodes):
        if _is_table(node) and node.users:
            with graph.inserting_after(node):
                stored = graph.call_function(torch.ops.kvprune.realized.default, (node,))
            node.replace_all_uses_with(stored, delete_user_cb=lambda user: user is not stored)
    graph.lint()


@dataclass(frozen=True)
class StepPasses:
    """``realize_rotary`` (where ``REALIZE_ROTARY``), then with ``fast_linear`` ``gemv.fuse_gates`` (where
    ``gemv.FUSE_GATES``) and ``gemv.group_linears``."""

    fast_linear: bool

    def __call__(self, graph: torch.fx.Graph) -> None:
        if REALIZE_ROTARY:
            realize_rotary(graph)
        if self.fast_linear:
            if gemv.FUSE_GATES:
                gemv.fuse_gates(graph)
            gemv.group_linears(graph)

    def uuid(self) -> str:
        return f"kvprune.step_passes.v1.rotary={REALIZE_ROTARY}.linear={self.fast_linear}.gates={gemv.FUSE_GATES}"
