"""The decode states a generator keeps between calls, within a memory budget: a call takes the kept state of its
shape, else (with a room above 1) the smallest kept one of the same grouping with room for it within that many times
its size, else a new one.

A state is a CUDA graph's buffers on a GPU (the step is captured once per state), so a call that decodes in a kept
state allocates and captures nothing. A roomier one (a shorter prompt after a longer one) saves states and captures
and costs little time: the fused decode attention reads each row's slots only up to its own last one, and splits
them by the row's own length, so the call sums its keys in the same order as in a state of its own shape and decodes
the same bits. The matmul path (the CPU's) sums over the whole buffer, where the order can follow its length: there
a call decodes in a state of its own shape only, so that its numbers depend on its own prompts alone (a sweep's
shards under ``accelerate launch`` equal one process)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from .decode_state import DecodeState, StateShape

#: how many times the room a call needs a kept state may have and still serve it (``Generator.state_room``'s default
#: on the matmul path; 1: its own shape only, so that no call's numbers depend on the calls before it)
ROOM = 1.0
#: the default where the decode attention is the fused kernels (``decode_attention.fused_kernels_run``): their sums
#: do not depend on the buffer's length, so a shorter prompt may reuse a state of up to twice its room
FUSED_ROOM = 2.0


def holds(have: float, need: float, room: float = ROOM) -> bool:
    """Whether a buffer of ``have`` entries serves a call that needs ``need``: enough, and at most ``room`` times it."""
    return need <= have <= room * need


class KeptStates:
    """Decode states by shape, least recently used first; beyond ``max_bytes`` the least recently used go (the one
    in use always stays). A kept state serves a call that needs at least 1 / ``room`` of each of its buffers (1: only
    calls of its own shape)."""

    def __init__(self, max_bytes: int, room: float = ROOM):
        if room < 1:
            raise ValueError(f"state_room must be at least 1 (1: each shape its own state), not {room}.")
        self.max_bytes, self.room = max_bytes, room
        self._states: OrderedDict[StateShape, DecodeState] = OrderedDict()

    def take(self, shape: StateShape, make: Callable[[], DecodeState]) -> tuple[DecodeState, bool]:
        """The state a call that needs ``shape`` decodes in (``make``: a new one, where none kept will do), and whether
        it was made."""
        state = self._states.pop(shape, None) or (self._roomy(shape) if self.room > 1 else None)  # 1: only its own
        made = state is None
        if made:
            state = make()
        self._states[state.shape] = state  # most recently used last
        while len(self._states) > 1 and self.nbytes > self.max_bytes:
            self._states.popitem(last=False)
        return state, made

    def _roomy(self, shape: StateShape) -> DecodeState | None:
        """Taken from the kept states: the smallest that fits ``shape`` with at most ``room`` times its room in every
        buffer; None if none does."""
        roomy = [kept for kept in self._states if kept.fits(shape) and all(
            holds(mine, theirs, self.room) for mine, theirs in zip((*kept.capacities, kept.new_tokens), (*shape.capacities, shape.new_tokens)))]
        return self._states.pop(min(roomy, key=lambda kept: sum(kept.capacities))) if roomy else None

    @property
    def nbytes(self) -> int:
        """Device memory the kept states hold (cache buffers of every shape met)."""
        return sum(state.nbytes for state in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def clear(self) -> None:
        self._states.clear()
