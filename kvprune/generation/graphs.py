"""Running the decode step: compiled (``torch.compile``, one compilation for every cache length: the
lengths are dynamic) and captured as a CUDA graph per decode state, replayed once per token.

Every captured graph allocates its temporaries from one memory pool shared by all graphs of a
``Generator`` (they never run at once), so graphs cost little memory beyond their states' buffers.
A step that cannot be captured (a model whose forward reads a device value on the host, such as
Phi-4's LongRoPE switch) is never silently slower: ``StepRunner.fallbacks`` says which states decode
without a graph and why, and ``Generator`` reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..compiling import (compiler_failures_unlogged, from_compiler, out_of_memory, reason, recompile_room,
                         warm_up_on_side_stream)
from .decode_state import DecodeState
from .dependent_launch import inductor_patches


def _pool_keeper(pool) -> torch.cuda.CUDAGraph:
    """A graph kept as long as its runner, so that the shared pool outlives the graphs of the decode states
    (which come and go within ``max_state_bytes``): once the last graph of a pool is gone, capturing into
    its handle again fails inside the allocator ("use_count > 0 INTERNAL ASSERT FAILED")."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        torch.ones(1, device="cuda").add_(1)
    return graph


def _distinct_lengths():
    """Each dynamic length its own symbol, even where two happen to be equal at the first compilation
    (torch's "duck sizing" would tie them, and recompile once they differ: layers < K and >= K)."""
    from torch.fx.experimental import _config as shape_config

    return shape_config.patch(use_duck_shape=False)


@dataclass
class StepRunner:
    """Runs a step function on decode states: compiled or not, captured as CUDA graphs or not."""

    step: Callable[[DecodeState], None]
    compile: bool
    cuda_graphs: bool
    compile_mode: str | None = None
    fast_linear: bool = False  # the Generator's: compile with ``gemv``'s passes too (``step_passes.StepPasses``)
    captures: int = 0  # CUDA graphs captured so far
    fallbacks: dict[str, int] = field(default_factory=dict)  # why a state or the step fell back, by reason: how often
    _compiled: Callable | None = None
    _failed: set = field(default_factory=set)  # groupings of layers (``StateShape.grouping``) whose step could not compile
    _pool: object = None
    _keeper: object = None  # see _pool_keeper

    def __post_init__(self) -> None:
        if self.compile:
            self._compiled = torch.compile(self.step, mode=self.compile_mode)

    def function(self, state: DecodeState) -> None:
        """One step on ``state``, compiled if asked for (the compiler pass is in force while it compiles,
        with room for one compilation per cache shape). A step that cannot compile for a grouping of layers
        says so in ``fallbacks`` and runs uncompiled for that grouping from then on, never silently; other
        groupings keep their compiled step (torch 2.11 fails now and then to build a guard of one grouping)."""
        if not self.compiled_for(state):
            return self.step(state)
        import torch._inductor.config as inductor_config

        from .step_passes import StepPasses

        patches = inductor_patches(state.tokens.device) | {"pre_grad_custom_pass": StepPasses(self.fast_linear)}
        state.mark_lengths_dynamic()
        try:
            with recompile_room(), inductor_config.patch(**patches), _distinct_lengths(), compiler_failures_unlogged():
                return self._compiled(state)
        except Exception as error:
            if not from_compiler(error):  # the model's own error (out of memory, bad inputs): the caller's
                raise
            groups = len(state.shape.capacities)
            self._note(f"compile failed, decoding uncompiled (layers in {groups} group(s)): {reason(error)}")
            self._failed.add(state.shape.grouping)
            return self.step(state)

    def compiled_for(self, state: DecodeState) -> bool:
        """Whether ``state``'s step runs compiled (asked for, and its grouping did not fail to compile)."""
        return self._compiled is not None and state.shape.grouping not in self._failed

    def prepare(self, state: DecodeState) -> None:
        """Capture ``state``'s step as a CUDA graph if that is asked for and not done yet: a warm-up
        step (compiling if needed) on a side stream, undone, then the capture."""
        if not self.cuda_graphs or state.graph is not None or state.graph is False:
            return
        saved = state.snapshot()
        try:
            warm_up_on_side_stream(lambda: self.function(state))
            state.restore(saved)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
                self._keeper = _pool_keeper(self._pool)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                self.function(state)
            state.graph = graph
            self.captures += 1
        except Exception as error:  # e.g. a host synchronisation inside the model's forward
            torch.cuda.synchronize()
            state.restore(saved)
            if out_of_memory(error):  # not the step's fault: the caller makes room
                raise
            state.graph = False
            self._note(f"no CUDA graph: {reason(error)}")

    def release_pool(self) -> None:
        """Let the graphs' memory pool go once its graphs are gone (the next capture opens a new one)."""
        self._pool = self._keeper = None

    def _note(self, reason: str) -> None:
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def run(self, state: DecodeState) -> None:
        """One step on ``state``: its graph replayed, or the step called."""
        if state.graph:
            state.graph.replay()
        else:
            self.function(state)
