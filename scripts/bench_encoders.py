"""Time every family's audio encoder, stock against kvprune's fast path, at the real shapes, against its
arithmetic.

    python scripts/bench_encoders.py --out "$OUT/encoders" --seconds 300 --profile   # one GPU, 5-8 minutes
    python scripts/bench_encoders.py --tiny --out /tmp/encoders                       # tiny shapes on the CPU

Each encoder is built alone from its bench preset's config (random weights, created on the device),
bf16 and sdpa on a GPU by default, and fed one clip of random features as that family's processor
shapes them (30 s windows, 500-frame chunks...). The run starts by timing one large matrix product
in that dtype (the card's GEMM rate). Per encoder and length it counts the stock call's FLOPs
(``FlopCounterMode``), then times stock and fast calls alternating in rounds (warm-up rounds first,
which absorb compilation), each alone (CUDA events on a GPU). A row gives the medians, the speedup,
the largest |stock - fast| and the largest relative difference (over the largest |stock|), whether
the outputs are bit-identical, the FLOPs, each path's achieved TFLOP/s, and the fast path's time over
its floor (its FLOPs at the measured GEMM rate); a time below its floor is flagged (a measurement
bug). Each fast path that compiles is timed as kvprune runs it, uncompiled, and with SDPA's cuDNN
kernel first (``--variants``; torch ranks it last); one that replays CUDA graphs also without them
(``ungraphed``); all encoders of one variant together.

Every measurement is its own try: a failure becomes an error row and the run goes on; rows are
written as they come (encoders.csv, encoders.md), and a measurement is not started after
``--minutes``. With --profile, profile_<encoder>.txt holds the top kernels of one stock and one fast
call at the longest audio.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import transformers

from kvprune import fast_audio_encoder
from kvprune.encoders import compiled as compiled_pieces
from kvprune.encoders import graphs as encoder_graphs
from kvprune.harness.bench.measure import Meter
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.bench.roofline import achieved_tflops, counted_flops, floor_ms, gemm_tflops
from kvprune.harness.bench.shapes import shapes_of
from kvprune.harness.markdown import markdown_table


@dataclass(frozen=True)
class Encoder:
    """One preset's audio encoder: its class, the config attribute holding its config, how the preset's
    model inputs become its own arguments, whether its fast path compiles (has variants) and whether it replays
    CUDA graphs (``encoders.graphs``: timed without them too)."""

    preset: str
    class_name: str
    arguments: Callable[[dict], dict]
    sub_config: str = "audio_config"
    compiles: bool = True
    graphs: bool = False

    @property
    def encoder_class(self) -> type[nn.Module]:
        if self.class_name == "Qwen2_5OmniAudioEncoder":
            from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder

            return Qwen2_5OmniAudioEncoder
        return getattr(transformers, self.class_name)

    def preset_name(self, tiny: bool) -> str:
        return shapes_of(PRESETS.get(self.preset).family).tiny_preset if tiny else self.preset


def _omni(features: dict) -> dict:  # what the thinker's get_audio_features passes for one clip
    return dict(input_features=features["input_features"][0], feature_lens=features["feature_attention_mask"].sum(-1))


ENCODERS = (
    Encoder("qwen2.5-omni-7b", "Qwen2_5OmniAudioEncoder", _omni, compiles=False),
    Encoder("qwen2.5-omni-3b", "Qwen2_5OmniAudioEncoder", _omni, compiles=False),
    Encoder("phi4-mm", "Phi4MultimodalAudioModel", lambda f: dict(hidden_states=f["audio_input_features"], mask=None),
            graphs=True),
    Encoder("voxtral-mini-3b", "VoxtralEncoder", lambda f: dict(input_features=f["input_features"])),
    # whole 30 s chunks at the lengths timed here, so no padding mask, as the model passes then
    Encoder("aero-1-audio-1.5b", "Qwen2AudioEncoder", lambda f: dict(input_features=f["audio_values"])),
    Encoder("audio-flamingo-3", "AudioFlamingo3Encoder",
            lambda f: dict(input_features=f["input_features"], input_features_mask=f["input_features_mask"])),
    Encoder("granite-speech-3.3-8b", "GraniteSpeechCTCEncoder", lambda f: dict(hidden_states=f["input_features"]),
            sub_config="encoder_config"),
)
@dataclass(frozen=True)
class Variant:
    """How the fast path runs: ``compile`` as ``fast_audio_encoder`` takes it (None: on CUDA), SDPA's kernel
    order for a compiled piece (None: kvprune's, ``compiled.ATTENTION_PRIORITY``, itself None: torch's), and
    whether a fast path that replays CUDA graphs does."""

    compile: bool | None = None
    priority: tuple[str, ...] | None = None
    graphs: bool = True


VARIANTS = {  # in the order they run (the last is the first left out of a short budget)
    "fast": Variant(),  # what fast_audio_encoder does by default
    "eager": Variant(compile=False),  # the same functions uncompiled: what the compilation adds
    "cudnn": Variant(priority=("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")),
    "ungraphed": Variant(graphs=False),  # compiled, its kernels launched one by one: what the CUDA graphs add
}
SHOWN = ["encoder", "seconds", "variant", "stock_ms", "fast_ms", "speedup", "max_rel_diff", "bit_identical", "tflop",
         "stock_tflops", "fast_tflops", "gemm_tflops", "fast_vs_floor", "below_floor", "uncompiled", "error"]


def build(encoder: Encoder, tiny: bool, device, dtype, attn: str):
    """The encoder with random weights on ``device``, and the config of the whole model it belongs to."""
    config = PRESETS.get(encoder.preset_name(tiny)).config()
    torch.manual_seed(0)
    with torch.device(device):
        module = encoder.encoder_class._from_config(getattr(config, encoder.sub_config), dtype=dtype,
                                                    attn_implementation=attn)
    return module.to(device).eval(), config


def encoder_inputs(encoder: Encoder, tiny: bool, config, seconds: float, device, dtype) -> dict:
    audio = PRESETS.get(encoder.preset_name(tiny)).family.prompting.audio_format
    features = audio.features(config, [audio.frames(config, seconds)], torch.Generator().manual_seed(0))
    return {
        name: value.to(device, dtype if value.is_floating_point() else None) if isinstance(value, torch.Tensor) else value
        for name, value in encoder.arguments(features).items()
    }


def hidden_states(output) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output[0]


@torch.no_grad()
def compare(module: nn.Module, inputs: dict, meter: Meter, compile: bool | None = None) -> dict:
    """Stock and fast calls (``compile`` as ``fast_audio_encoder`` takes it) alternating in rounds; medians,
    and how far apart their outputs are."""
    stock = hidden_states(module(**inputs))
    with fast_audio_encoder(module, compile) as fast_path:
        fast = hidden_states(module(**inputs))  # the first call compiles where the fast path does
    if not bool(torch.isfinite(stock).all()):
        raise ValueError(f"{type(module).__name__}: the stock output is not finite with these random weights")
    times: dict[str, list[float]] = {"stock": [], "fast": []}
    for round_ in range(meter.warmup + meter.repeats):
        for variant in ("stock", "fast") if round_ % 2 == 0 else ("fast", "stock"):
            handle = fast_audio_encoder(module, compile) if variant == "fast" else None
            ms = meter.once_ms(lambda: module(**inputs))
            if handle is not None:
                handle.remove()
            if round_ >= meter.warmup:
                times[variant].append(ms)
    stock_ms, fast_ms = statistics.median(times["stock"]), statistics.median(times["fast"])
    difference = float((stock.float() - fast.float()).abs().max())
    failed = [f"{piece.what}: {piece.failed}" for piece in _pieces(type(module).__name__) if piece.failed]
    return dict(
        output_frames=stock.shape[:-1].numel(),
        stock_ms=round(stock_ms, 3),
        fast_ms=round(fast_ms, 3),
        speedup=round(stock_ms / fast_ms, 3),
        max_abs_diff=difference,
        max_rel_diff=difference / max(float(stock.float().abs().max()), 1e-30),
        bit_identical=torch.equal(stock, fast),
        uncompiled="; ".join(failed),
        changes="; ".join(fast_path.changes) or "none: " + "; ".join(fast_path.unchanged),
    )


def _pieces(encoder_class: str | None = None) -> list:
    """The compiled pieces an encoder class runs (None: every class's)."""
    from kvprune.encoders import granite, phi4, whisper

    pieces = {"Phi4MultimodalAudioModel": [phi4.BLOCK], "GraniteSpeechCTCEncoder": [granite.BLOCK],
              **{name: [whisper.STEM, whisper.LAYER, whisper.TAIL] for name in whisper.STYLES}}
    return pieces.get(encoder_class, []) if encoder_class else list(dict.fromkeys(p for own in pieces.values() for p in own))


def with_roofline(row: dict, flops: int, gemm: float) -> dict:
    """The row with its FLOPs, each path's achieved TFLOP/s, the fast path over its floor, and a flag where
    a time is below the floor."""
    floor = floor_ms(flops, gemm)
    return dict(row, flops=flops, tflop=flops / 1e12, stock_tflops=achieved_tflops(flops, row["stock_ms"]),
                fast_tflops=achieved_tflops(flops, row["fast_ms"]), gemm_tflops=gemm, floor_ms=floor,
                fast_vs_floor=row["fast_ms"] / floor, below_floor=min(row["stock_ms"], row["fast_ms"]) < floor)


@torch.no_grad()
def profile(module: nn.Module, inputs: dict, meter: Meter, path: Path) -> None:
    """The top operations of one stock and one fast call, by device time (host time on a CPU)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if meter.cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sort_by = "self_device_time_total" if meter.cuda else "self_cpu_time_total"
    sections = []
    for variant in ("stock", "fast"):
        handle = fast_audio_encoder(module) if variant == "fast" else None
        with torch.profiler.profile(activities=activities) as profiler:
            module(**inputs)
            meter.sync()
        if handle is not None:
            handle.remove()
        table = profiler.key_averages().table(sort_by=sort_by, row_limit=25, max_name_column_width=70)
        sections.append(f"== {variant}\n{table}")
    path.write_text("\n".join(sections))


class Results:
    """The rows so far, written to encoders.csv and encoders.md after each one."""

    def __init__(self, out: Path, header: str):
        self.out, self.header, self.rows = out, header, []

    def add(self, row: dict) -> None:
        self.rows.append(row)
        print({k: row[k] for k in SHOWN if k in row}, flush=True)
        fields = list(dict.fromkeys(key for r in self.rows for key in r))
        with open(self.out / "encoders.csv", "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=fields)
            writer.writeheader()
            writer.writerows(self.rows)
        (self.out / "encoders.md").write_text(self.markdown())

    def markdown(self) -> str:
        columns = [c for c in SHOWN if any(c in row for row in self.rows)]
        lines = [self.header, "", markdown_table(columns, ([_cell(row.get(c, "")) for c in columns] for row in self.rows))]
        below = [r for r in self.rows if r.get("below_floor")]
        if below:
            lines += ["", "**Below the FLOP floor (a measurement bug):** "
                      + ", ".join(f"{r['encoder']} {r['seconds']:g} s {r['variant']}" for r in below)]
        changes = {row["encoder"]: row.get("changes") for row in self.rows if row.get("changes")}
        lines += ["", *(f"- **{name}**: {change}" for name, change in changes.items())]
        return "\n".join(lines) + "\n"


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for encoders.csv and encoders.md")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (the tiny-* presets), for a CPU")
    parser.add_argument("--seconds", help="comma-separated audio lengths (default 30,120,300; tiny: 5,45)")
    parser.add_argument("--encoders", help=f"comma-separated subset of: {', '.join(e.preset for e in ENCODERS)}")
    parser.add_argument("--variants", help=f"comma-separated subset of: {', '.join(VARIANTS)} (default: all on a GPU, "
                        "fast on a CPU, where nothing compiles)")
    parser.add_argument("--device", help="default: cuda if available")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default: bfloat16 on a GPU")
    parser.add_argument("--attn-implementation", default="sdpa", choices=["sdpa", "eager", "flash_attention_2"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--minutes", type=float, default=7.0,
                        help="start no measurement after this long (default 7: a first compilation may add a minute)")
    parser.add_argument("--profile", action="store_true", help="also write profile_<encoder>.txt at the longest audio")
    args = parser.parse_args(argv)

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    seconds = [float(s) for s in (args.seconds or ("5,45" if args.tiny else "30,120,300")).split(",")]
    chosen = args.encoders.split(",") if args.encoders else [e.preset for e in ENCODERS]
    variants = args.variants.split(",") if args.variants else list(VARIANTS) if device.type == "cuda" else ["fast"]
    for names, known in ((chosen, [e.preset for e in ENCODERS]), (variants, list(VARIANTS))):
        if set(names) - set(known):
            parser.error(f"unknown {sorted(set(names) - set(known))}; choose from {', '.join(known)}")
    deadline = time.monotonic() + 60 * args.minutes
    meter = Meter(device, args.warmup, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    gemm = gemm_tflops(meter, dtype)
    setting = dict(device=name, dtype=str(dtype).removeprefix("torch."), attn=args.attn_implementation,
                   torch=torch.__version__, transformers=transformers.__version__)
    results = Results(args.out, (
        f"Audio encoders, stock vs kvprune's fast path: {name}, {setting['dtype']}, {setting['attn']}, torch "
        f"{setting['torch']}, transformers {setting['transformers']}; medians of {args.repeats} after {args.warmup} "
        f"warm-up rounds; GEMM rate {gemm:.1f} TFLOP/s ({setting['dtype']}, measured in this run); fast_vs_floor = "
        "fast ms / (FLOPs at the GEMM rate); max_rel_diff = max |stock - fast| / max |stock|."))

    built: dict[str, tuple] = {}
    flops_of: dict[tuple[str, float], int] = {}  # (encoder, seconds) -> FLOPs of its stock call
    for variant in variants:
        priority = VARIANTS[variant].priority or compiled_pieces.ATTENTION_PRIORITY
        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()  # compile each variant's pieces afresh (the kernel order is chosen when compiling)
        for piece in _pieces():
            piece.reset()  # and try again where a piece failed to compile in another variant
        runs = {"fast": lambda e: True, "ungraphed": lambda e: e.graphs}.get(variant, lambda e: e.compiles)
        for encoder in (e for e in ENCODERS if e.preset in chosen and runs(e)):
            for length in seconds:
                row = dict(encoder=encoder.preset, seconds=length, variant=variant)
                if time.monotonic() > deadline:
                    results.add(dict(row, error=f"skipped: past --minutes {args.minutes:g}", **setting))
                    continue
                default, compiled_pieces.ATTENTION_PRIORITY = compiled_pieces.ATTENTION_PRIORITY, priority
                capacity = encoder_graphs.CAPACITY
                encoder_graphs.CAPACITY = capacity if VARIANTS[variant].graphs else 0
                try:
                    if encoder.preset not in built:
                        built[encoder.preset] = build(encoder, args.tiny, device, dtype, args.attn_implementation)
                    module, config = built[encoder.preset]
                    inputs = encoder_inputs(encoder, args.tiny, config, length, device, dtype)
                    if (encoder.preset, length) not in flops_of:  # the stock call's: the same for every variant
                        flops_of[(encoder.preset, length)] = counted_flops(lambda: module(**inputs))
                    flops = flops_of[(encoder.preset, length)]
                    row = with_roofline(dict(row, **compare(module, inputs, meter, VARIANTS[variant].compile)), flops, gemm)
                    if args.profile and length == max(seconds) and variant == variants[0]:
                        profile(module, inputs, meter, args.out / f"profile_{encoder.preset}.txt")
                except Exception as error:  # e.g. out of memory: record it, go on with the next
                    row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
                finally:
                    compiled_pieces.ATTENTION_PRIORITY = default
                    encoder_graphs.CAPACITY = capacity
                results.add(dict(row, **setting))
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    print(results.markdown())


if __name__ == "__main__":
    main()
