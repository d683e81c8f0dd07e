"""Throughput at batch sizes, and the largest batch that fits: the memory pruning frees (KV cache and
activations of the layers >= K), turned into requests per second.

A batch holds the same prompt in every row. Throughput follows from one timed request at that batch
size (prefill, then the forced tokens): requests/s = batch / request time, prefill tokens/s = batch
x prompt length / prefill time, decoded tokens/s = batch x forced tokens / decoding time.

The largest batch is first predicted from the measured requests: a request costs ``peak - memory
before it + its inputs + what it reused`` (the engine's decode state kept from an earlier round); a row
costs the slope of that between the two largest batch sizes timed (the rest is the request's own, such
as one prefill's activations). Before the search the engine's kept states are dropped, and the device
can give the allocator what is free plus what it already reserved, beside what stays allocated (the
weights). The prediction is then run (its prefill and the decoding); if that runs out of memory, 10%
fewer rows are tried, and if it runs, 10% more (the prediction is only as good as its slope: from one batch
size it counts the request's own memory as the rows', and understates the batch), up to ``TRIES`` sizes, until
one side of the largest is found; then the size halfway between the largest that ran and the smallest that
did not (``REFINE`` times): the batch found is then within ~2.5% of the largest, not 10%, at two more
compilations. Only on CUDA, where memory is measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .measure import RequestTiming

TRIES = 4
REFINE = 2  # tries halfway between the largest size that ran and the smallest that did not
LIMIT = 4096  # no batch beyond this is tried


def row_bytes(samples: dict[int, RequestTiming], input_bytes: dict[int, int]) -> tuple[float, float]:
    """(device memory one more row needs, memory a request needs besides its rows), from the batch sizes
    measured (NaN, 0 if none). With two or more: the slope between the two largest (what the engine's
    prefill of one micro-batch holds does not grow with the rows, so dividing it by few rows would
    overstate a row); with one, or a slope that is not positive: the largest cost per row, nothing besides."""
    costs = {b: s.peak_bytes - s.base_bytes + input_bytes[b] + s.reused_bytes for b, s in samples.items()}
    costs = {b: c for b, c in costs.items() if not math.isnan(c)}
    if not costs:
        return math.nan, 0.0
    if len(costs) >= 2:
        small, large = sorted(costs)[-2:]
        slope = (costs[large] - costs[small]) / (large - small)
        if slope > 0:
            return slope, max(0.0, costs[large] - large * slope)
    return max(c / b for b, c in costs.items()), 0.0


def predicted_batch(per_row: float, fixed_bytes: float, capacity_bytes: float) -> int:
    """Rows that fit beside ``fixed_bytes`` (weights and whatever else stays) in ``capacity_bytes``."""
    if math.isnan(per_row) or per_row <= 0:
        return 0
    return max(0, min(LIMIT, int((capacity_bytes - fixed_bytes) // per_row)))


def allocatable_bytes(device: torch.device) -> float:
    """Memory the allocator can hand out in all: free on the device plus what it holds already."""
    free, _ = torch.cuda.mem_get_info(device)
    return float(free + torch.cuda.memory_reserved(device))


def largest_fitting(predicted: int, fits: Callable[[int], bool]) -> int:
    """The largest batch that runs (``fits(batch)``: False when out of memory), searched from the prediction:
    10% fewer rows at a time while none has run, 10% more while each runs (never beyond ``LIMIT``), ``TRIES`` sizes
    in all, then ``REFINE`` tries halfway between the largest size that ran and the smallest that did not; 0 if
    none ran."""
    batch, ran, failed = min(predicted, LIMIT), None, None
    for _ in range(TRIES):
        if batch < 1:
            return 0
        if fits(batch):
            ran = batch
            if failed is not None or batch == LIMIT:
                break
            batch = min(LIMIT, max(batch + 1, int(batch * 1.1)))
        else:
            failed = batch
            if ran is not None:
                break
            batch = int(batch * 0.9)
    if ran is None:
        return 0
    for _ in range(REFINE):
        if failed is None or failed - ran <= 1:
            break
        middle = (ran + failed) // 2
        ran, failed = (middle, failed) if fits(middle) else (ran, middle)
    return ran


def throughput_at(timing, rows: int) -> dict:
    """Requests and decoded tokens per second of the request timed at the largest batch (NaN if none)."""
    if timing is None or not rows or math.isnan(timing.request_ms):
        return dict(max_batch_requests_per_s=math.nan, max_batch_decode_tokens_per_s=math.nan)
    return dict(
        max_batch_requests_per_s=rows / (timing.request_ms / 1000.0),
        max_batch_decode_tokens_per_s=rows / (timing.decode_ms_per_token / 1000.0),
    )
