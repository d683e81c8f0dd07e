"""Marks on the device timeline (CUDA events) or the host clock: how the engine and the harness time
work that the device runs asynchronously."""

from __future__ import annotations

import time

import torch


class Clock:
    """Marks on the device timeline (CUDA events, on the device's current stream) or the host clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return time.perf_counter()

    def seconds(self, start, end) -> float:
        """Seconds between two marks (waiting for the device to reach ``end``)."""
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        return end - start

    def sync(self) -> None:
        """Wait for the device's queued work (a no-op on CPU), so that marks can be read."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
