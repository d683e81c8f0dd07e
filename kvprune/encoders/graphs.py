"""An encoder forward replayed from CUDA graphs, one per input shape.

Where an encoder's layers are small for the card (Phi-4's conformer: 4,000 frames of width 1,024 for
300 s of audio), the host launching its kernels one by one holds the GPU back. A CUDA graph launches
the whole forward at once: Phi-4's compiled encoder on 300 s takes 25.1 ms instead of 29.1 on an H100.

The forward is captured the second time it is called with the same inputs' shapes (the first call
compiles and warms it up), after one more warm-up on a stream of its own, as torch asks; it is
replayed from then on: the inputs are copied into the graph's own tensors and its output is returned
as a copy, so a caller never holds memory the next replay overwrites. The graphs belong to the encoder
module, not to one installation of the fast path, so a loop that installs the fast path per request
(the bench does) still replays them, and their memory is released with the module. A graph is
captured again when any of the encoder's weights or buffers has moved (``model.to``, weights assigned
anew: a replay reads the addresses it was captured with) or SDPA's kernel order for compiled pieces
changed. At most ``CAPACITY`` graphs are kept per encoder (each holds its forward's activations), the
least recently used dropped first. Calls that record gradients, run on the CPU or arrive while a graph
is being captured run the forward as it is. A capture that fails (a forward that reads the device from
the host) says so once and that encoder's forward runs plain from then on.
"""

from __future__ import annotations

import itertools
import warnings
import weakref
from collections import OrderedDict
from typing import Callable

import torch
import torch.nn as nn

from ..compiling import warm_up_on_side_stream
from . import compiled

#: graphs one encoder keeps (input shapes); each holds its forward's intermediate tensors (0: none, never captured)
CAPACITY = 2
#: input signatures remembered as called before (a graph dropped for another shape is captured again at once)
SEEN = 64


class _Graphs:
    """One encoder's graphs, the input signatures it was called with, and a capture's failure."""

    def __init__(self):
        self.seen: OrderedDict = OrderedDict()  # signatures called before, most recent last
        self.captured: OrderedDict = OrderedDict()  # signature -> _Graph, most recent last
        self.failed: str | None = None


_BY_MODULE: "weakref.WeakKeyDictionary[nn.Module, _Graphs]" = weakref.WeakKeyDictionary()


class GraphedForward:
    """``forward(hidden_states, mask)`` of ``module``, replayed from a CUDA graph per input signature."""

    def __init__(self, forward: Callable, module: nn.Module, what: str):
        self.forward = forward
        self.module = module
        self.what = what

    def __call__(self, hidden_states: torch.Tensor, mask: torch.Tensor | None):
        if not _graphable(hidden_states, mask):
            return self.forward(hidden_states, mask)
        graphs = _BY_MODULE.setdefault(self.module, _Graphs())
        if graphs.failed is not None:
            return self.forward(hidden_states, mask)
        key = (_signature(hidden_states), _signature(mask), torch.is_inference_mode_enabled(), compiled.ATTENTION_PRIORITY)
        weights = tuple(t.data_ptr() for t in itertools.chain(self.module.parameters(), self.module.buffers()))
        graph = graphs.captured.get(key)
        if graph is not None and graph.weights != weights:
            del graphs.captured[key]  # captured on tensors that have moved since
            graph = None
        if graph is None:
            if key not in graphs.seen:  # the first call: compile and warm up, as the forward runs
                _remember(graphs.seen, key, True, SEEN)
                return self.forward(hidden_states, mask)
            try:
                graph = _Graph(self.forward, hidden_states, mask, weights)
            except Exception as error:  # noqa: BLE001 - the forward could not be captured: it runs as it is
                graphs.failed = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                graphs.captured.clear()
                warnings.warn(f"kvprune: the fast audio encoder's {self.what} could not be captured in a CUDA graph "
                              f"and launches its kernels one by one from now on (same results): {graphs.failed}",
                              RuntimeWarning, stacklevel=2)
                return self.forward(hidden_states, mask)
            _remember(graphs.captured, key, graph, CAPACITY)
        graphs.captured.move_to_end(key)
        return graph.replay(hidden_states, mask)


def _graphable(hidden_states: torch.Tensor, mask: torch.Tensor | None) -> bool:
    return (
        CAPACITY > 0 and hidden_states.is_cuda and (mask is None or mask.is_cuda)
        and not torch.is_grad_enabled() and not torch.cuda.is_current_stream_capturing()
    )


def _remember(entries: OrderedDict, key, value, capacity: int) -> None:
    entries[key] = value
    while len(entries) > capacity:
        entries.popitem(last=False)


class _Graph:
    """One captured forward: its input tensors, its output, the weights' addresses it read."""

    def __init__(self, forward: Callable, hidden_states: torch.Tensor, mask: torch.Tensor | None, weights: tuple):
        self.weights = weights
        self.hidden_states = hidden_states.clone()
        self.mask = None if mask is None else mask.clone()
        warm_up_on_side_stream(lambda: forward(self.hidden_states, self.mask))
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = forward(self.hidden_states, self.mask)

    def replay(self, hidden_states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        self.hidden_states.copy_(hidden_states)
        if mask is not None:
            self.mask.copy_(mask)
        self.graph.replay()
        return self.output.clone()


def _signature(tensor: torch.Tensor | None):
    if tensor is None:
        return None
    return tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, tensor.device
