"""How close an audio encoder and a decode step run to their arithmetic and their bytes.

The device's two rates are measured in the same run: its matrix-product rate in the bench's dtype (one
large square product) and its copy bandwidth (bytes read plus written by one large device copy).

* The audio encoder: the FLOPs of the span the bench times as the encoder (its first module's start to its
  projector's end), counted with torch's ``FlopCounterMode``; its floor (those FLOPs at the matrix rate: no
  encoder can run faster), achieved TFLOP/s and how many times its floor it takes.
* A decode step at the largest batch: its matrix products (each linear layer and the head, 2 x weights x
  rows; attention, 4 x heads x head_dim x every cached entry) at the matrix rate, and its bytes (the
  decoder's weights once, every row's keys and values once) at the copy rate: one step can be no faster
  than the larger of the two. Where the products and the attention run one after the other, as they do
  (the two at once slow each other on a GPU's shared memory system), the step takes at least its
  *sequential* bound: the products (or the weights' bytes they read, whichever is longer) plus the keys'
  and values' bytes.

A time below its floor is a measurement bug.
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from kvprune.models import resolve_family

from .measure import Meter, takes_logits_to_keep

GEMM_SIZE = {"cuda": 8192, "cpu": 512}  # the side of the square product timed (CPU: small, for tests)
GEMM_RUNS = (10, 20)  # warm-up runs (the clocks ramp up), then timed runs
COPY_BYTES = {"cuda": 2 << 30, "cpu": 16 << 20}  # the tensor copied to time the copy bandwidth


def gemm_tflops(meter: Meter, dtype: torch.dtype) -> float:
    """TFLOP/s of one (n x n) @ (n x n) product on the meter's device in ``dtype``: the median of its timed
    runs after the warm-up (``GEMM_RUNS``)."""
    n = GEMM_SIZE.get(meter.device.type, GEMM_SIZE["cpu"])
    generator = torch.Generator(device=meter.device).manual_seed(0)
    a, b = (torch.randn(n, n, device=meter.device, dtype=dtype, generator=generator) for _ in range(2))
    ms = Meter(meter.device, *GEMM_RUNS).median_ms(lambda: torch.mm(a, b))
    return 2 * n**3 / (ms * 1e-3) / 1e12


def copy_tb_s(meter: Meter) -> float:
    """TB/s of one device-to-device copy (bytes read plus written), the median of its timed runs (``GEMM_RUNS``)."""
    n = COPY_BYTES.get(meter.device.type, COPY_BYTES["cpu"]) // 4
    source = torch.randn(n, device=meter.device, generator=torch.Generator(device=meter.device).manual_seed(0))
    target = torch.empty_like(source)
    ms = Meter(meter.device, *GEMM_RUNS).median_ms(lambda: target.copy_(source))
    return 2 * 4 * n / (ms * 1e-3) / 1e12


def decode_step_work(model: nn.Module, rows: int, kv_bytes: float) -> tuple[float, float]:
    """(matrix FLOPs, bytes) of one decode step of ``rows`` rows whose caches hold ``kv_bytes`` of keys and
    values in all (module docstring)."""
    family = resolve_family(model)
    decoder, head = family.decoder(model), family.entry(model).get_output_embeddings()
    config = decoder.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    linears = [m.weight for m in decoder.modules() if isinstance(m, nn.Linear)] + [head.weight]
    kv_entry_bytes = 2 * config.num_key_value_heads * head_dim * linears[0].element_size()  # a key and a value, every head
    flops = 2 * sum(w.numel() for w in linears) * rows + 4 * config.num_attention_heads * head_dim * kv_bytes / kv_entry_bytes
    embedding = decoder.get_input_embeddings().weight  # a step reads one row of it per token, not all of it
    weights = sum(p.numel() * p.element_size() for p in decoder.parameters()) - embedding.numel() * embedding.element_size()
    return flops, weights + head.weight.numel() * head.weight.element_size() + kv_bytes


@torch.no_grad()
def counted_flops(fn) -> int:
    """The FLOPs torch counts for one call of ``fn`` (matrix products, convolutions, attention)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


class _DecoderReached(Exception):
    """Raised as the decoder's first layer is entered: what ``encoder_span_flops`` counts has run."""


@torch.no_grad()
def encoder_span_flops(model: nn.Module, inputs: dict) -> int:
    """The FLOPs of one prefill of ``model`` on ``inputs`` from its audio encoder's start to its projector's
    end (the span a bench row's ``encoder_ms`` times), run as the model's own code (the stock encoder). The
    call stops where the decoder's first layer begins: the decoder is not run (torch counts no attention
    whose keys have fewer heads than its queries, as a GQA decoder's have, and would stop the count)."""
    family = resolve_family(model)
    start, end = family.audio_encoder(model)
    totals: list[int] = []

    def stop(*_):
        raise _DecoderReached

    with FlopCounterMode(display=False) as counter:
        handles = [start.register_forward_pre_hook(lambda *_: totals.append(counter.get_total_flops())),
                   end.register_forward_hook(lambda *_: totals.append(counter.get_total_flops())),
                   family.layers(model)[0].register_forward_pre_hook(stop)]
        try:
            model(**inputs, use_cache=False, **({"logits_to_keep": 1} if takes_logits_to_keep(model) else {}))
        except _DecoderReached:
            pass
        finally:
            for handle in handles:
                handle.remove()
    return totals[-1] - totals[0]


def floor_ms(flops: float, tflops: float) -> float:
    """The time ``flops`` take at ``tflops`` TFLOP/s."""
    return flops / (tflops * 1e12) * 1e3


def achieved_tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


# -- the report's columns and lines ---------------------------------------------------------------------------------
def with_encoder_bound(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (rows with ``encoder_ms``, ``encoder_flops`` and the run's ``gemm_tflops``) with the encoder's
    achieved TFLOP/s, its floor in ms, its time over its floor and whether it is below it."""
    flops, ms = pd.to_numeric(frame["encoder_flops"]), pd.to_numeric(frame["encoder_ms"])
    frame["encoder_tflops_s"] = flops / (ms * 1e9)
    frame["encoder_floor_ms"] = flops / (pd.to_numeric(frame["gemm_tflops"]) * 1e9)
    frame["encoder_vs_floor"] = ms / frame["encoder_floor_ms"]
    frame["encoder_below_floor"] = (ms < frame["encoder_floor_ms"]).fillna(False).astype(bool)
    return frame


def with_decode_bound(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each row's decode step (``step_*``: a batch-mode row at its batch size) and the largest
    batch's (``max_batch_step_*``) against their bounds: the step's matrix FLOPs at the run's ``gemm_tflops``,
    its bytes at its ``copy_tb_s``, the step's time over the larger of the two; and, given the keys' and values'
    bytes (``kv_bytes``, ``max_batch_kv_bytes``), its sequential bound and the step's time over it."""
    for work, time, out, kv in (("step", "decode_ms_per_token", "step", "kv_bytes"),
                                ("max_batch_step", "max_batch_step_ms", "max_batch", "max_batch_kv_bytes")):
        if f"{work}_flops" not in frame:  # a frame of the other kind of rows alone
            continue
        copy = pd.to_numeric(frame["copy_tb_s"]) * 1e9
        matmul = pd.to_numeric(frame[f"{work}_flops"]) / (pd.to_numeric(frame["gemm_tflops"]) * 1e9)
        nbytes = pd.to_numeric(frame[f"{work}_bytes"]) / copy
        step = pd.to_numeric(frame[time])
        frame[f"{out}_matmul_bound_ms"], frame[f"{out}_bytes_bound_ms"] = matmul, nbytes
        frame[f"{out}_vs_bound"] = step / pd.concat([matmul, nbytes], axis=1).max(axis=1, skipna=False)
        entries = pd.to_numeric(frame[kv]) / copy if kv in frame else pd.Series(float("nan"), index=frame.index)
        weights = nbytes - entries  # the bytes the products read themselves
        sequential = pd.concat([matmul, weights], axis=1).max(axis=1, skipna=False) + entries
        frame[f"{out}_sequential_bound_ms"] = sequential
        frame[f"{out}_vs_sequential"] = step / sequential
    return frame


def bound_line(rows: pd.DataFrame) -> str:
    """One preset and audio length's encoder against its floor, in words (empty where not counted)."""
    counted = rows[rows["encoder_flops"].notna() & rows["encoder_ms"].notna()]
    if counted.empty or pd.isna(counted["gemm_tflops"].iloc[0]):
        return ""
    first = counted.iloc[0]
    paths = []
    for encoder in ("fast", "stock"):
        own = counted[counted["encoder"] == encoder]
        if not own.empty:
            best = own["encoder_vs_floor"].min()
            paths.append(f"{'kvprune' if encoder == 'fast' else 'stock'}'s at {own['encoder_tflops_s'].max():.0f} TFLOP/s, "
                         f"{best:.2f}x its floor")
    return (f"Audio encoder (to its projector's end): {first['encoder_flops'] / 1e12:.2f} TFLOP counted; floor "
            f"{first['encoder_floor_ms']:.1f} ms at the {first['gemm_tflops']:.0f} TFLOP/s of one large matrix product "
            f"measured in this run; " + "; ".join(paths) + " (best row).")


def below_floor_lines(frame: pd.DataFrame) -> list[str]:
    """A section listing rows whose encoder time is below its FLOP floor (a measurement bug), if any."""
    below = frame[frame["encoder_below_floor"]]
    if below.empty:
        return []
    return ["", "## Encoder faster than its FLOP floor (a measurement bug: look at these rows)", "",
            *(f"- {r.preset} {r.audio_seconds:g} s {r.method} {r.ratio:g}: encoder {r.encoder_ms:.1f} ms against a floor of "
              f"{r.encoder_floor_ms:.1f} ms" for r in below.itertuples())]
