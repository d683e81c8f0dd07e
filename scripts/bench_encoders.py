"""Time every family's audio encoder, stock against kvprune's fast path, at the real shapes.

    python scripts/bench_encoders.py --out results/encoders                 # one GPU, about a minute
    python scripts/bench_encoders.py --out results/encoders --profile       # + a kernel table per encoder
    python scripts/bench_encoders.py --tiny --out /tmp/encoders             # tiny shapes on the CPU, seconds

Each encoder is built alone from its bench preset's config (random weights, created on the device),
bf16 and sdpa on a GPU by default, and fed one clip of 30 s, 2 min and 5 min of random features as
that family's processor shapes them. Stock and fast calls alternate in rounds (warm-up rounds
first), each timed alone (CUDA events on a GPU); the table gives medians, the speedup, the largest
|stock - fast| over the output and whether the outputs are bit-identical. Writes encoders.csv and
encoders.md (and with --profile, profile_<encoder>.txt: the top kernels of one stock and one fast
call at the longest audio) to --out.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import transformers
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder

from kvprune import fast_audio_encoder
from kvprune.harness.bench.measure import Meter
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.markdown import markdown_table


@dataclass(frozen=True)
class Encoder:
    """One family's audio encoder: its class, the presets whose configs give its real and tiny
    shapes, and how the preset's model inputs become the encoder's own arguments."""

    name: str
    encoder_class: type[nn.Module]
    preset: str
    tiny_preset: str
    arguments: Callable[[dict], dict]


ENCODERS = (
    Encoder(
        "qwen2.5-omni",
        Qwen2_5OmniAudioEncoder,
        "qwen2.5-omni-7b",
        "tiny-omni",
        # what the thinker's get_audio_features passes for one clip
        lambda f: dict(input_features=f["input_features"][0], feature_lens=f["feature_attention_mask"].sum(-1)),
    ),
    Encoder(
        "phi4-mm",
        transformers.Phi4MultimodalAudioModel,
        "phi4-mm",
        "tiny-phi4",
        lambda f: dict(hidden_states=f["audio_input_features"], mask=None),
    ),
    Encoder(
        "voxtral",
        transformers.VoxtralEncoder,
        "voxtral-mini-3b",
        "tiny-voxtral",
        lambda f: dict(input_features=f["input_features"]),
    ),
    Encoder(
        "whisper (qwen2-audio, aero-1)",
        transformers.Qwen2AudioEncoder,
        "aero-1-audio-1.5b",
        "tiny-aero",
        # whole 30 s chunks at the lengths timed here, so no padding mask, as the model passes then
        lambda f: dict(input_features=f["audio_values"]),
    ),
)


def build(encoder: Encoder, tiny: bool, device: torch.device, dtype: torch.dtype, attn: str):
    """The encoder with random weights on ``device``, and the config of the whole model it belongs to."""
    config = PRESETS.get(encoder.tiny_preset if tiny else encoder.preset).config()
    torch.manual_seed(0)
    with torch.device(device):
        module = encoder.encoder_class._from_config(config.audio_config, dtype=dtype, attn_implementation=attn)
    return module.to(device).eval(), config


def encoder_inputs(encoder: Encoder, tiny: bool, config, seconds: float, device, dtype) -> dict:
    audio = PRESETS.get(encoder.tiny_preset if tiny else encoder.preset).family.audio_format
    features = audio.features(config, [audio.frames(config, seconds)], torch.Generator().manual_seed(0))
    return {
        name: value.to(device, dtype if value.is_floating_point() else None) if isinstance(value, torch.Tensor) else value
        for name, value in encoder.arguments(features).items()
    }


def hidden_states(output) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.last_hidden_state


@torch.no_grad()
def compare(module: nn.Module, inputs: dict, meter: Meter) -> dict:
    """Stock and fast calls alternating in rounds; medians, and how far apart their outputs are."""
    stock = hidden_states(module(**inputs))
    with fast_audio_encoder(module) as fast_path:
        fast = hidden_states(module(**inputs))
    if not bool(torch.isfinite(stock).all()):
        raise ValueError(f"{type(module).__name__}: the stock output is not finite with these random weights")
    times: dict[str, list[float]] = {"stock": [], "fast": []}
    for round_ in range(meter.warmup + meter.repeats):
        for variant in ("stock", "fast") if round_ % 2 == 0 else ("fast", "stock"):
            handle = fast_audio_encoder(module) if variant == "fast" else None
            ms = meter.once_ms(lambda: module(**inputs))
            if handle is not None:
                handle.remove()
            if round_ >= meter.warmup:
                times[variant].append(ms)
    stock_ms, fast_ms = statistics.median(times["stock"]), statistics.median(times["fast"])
    return dict(
        output_frames=stock.shape[:-1].numel(),
        stock_ms=round(stock_ms, 3),
        fast_ms=round(fast_ms, 3),
        speedup=round(stock_ms / fast_ms, 3),
        max_abs_diff=float((stock.float() - fast.float()).abs().max()),
        bit_identical=torch.equal(stock, fast),
        changes="; ".join(fast_path.changes) or "none: " + "; ".join(fast_path.unchanged),
    )


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
        table = profiler.key_averages().table(sort_by=sort_by, row_limit=15, max_name_column_width=70)
        sections.append(f"== {variant}\n{table}")
    path.write_text("\n".join(sections))


def markdown(rows: list[dict], header: str) -> str:
    columns = ["encoder", "seconds", "output_frames", "stock_ms", "fast_ms", "speedup", "max_abs_diff", "bit_identical"]
    lines = [header, "", markdown_table(columns, ([str(row.get(c, "")) for c in columns] for row in rows))]
    changes = {row["encoder"]: row.get("changes") or row.get("error") for row in rows}
    lines += ["", *(f"- **{name}**: {change}" for name, change in changes.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for encoders.csv and encoders.md")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (the tiny-* presets), for a CPU")
    parser.add_argument("--seconds", help="comma-separated audio lengths (default 30,120,300; tiny: 5,45)")
    parser.add_argument("--encoders", help=f"comma-separated subset of: {', '.join(e.name for e in ENCODERS)}")
    parser.add_argument("--device", help="default: cuda if available")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default: bfloat16 on a GPU")
    parser.add_argument("--attn-implementation", default="sdpa", choices=["sdpa", "eager", "flash_attention_2"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="also write profile_<encoder>.txt at the longest audio")
    args = parser.parse_args(argv)

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    seconds = [float(s) for s in (args.seconds or ("5,45" if args.tiny else "30,120,300")).split(",")]
    chosen = set(args.encoders.split(",")) if args.encoders else {e.name for e in ENCODERS}
    unknown = chosen - {e.name for e in ENCODERS}
    if unknown:
        parser.error(f"unknown encoders {sorted(unknown)}; choose from {', '.join(e.name for e in ENCODERS)}")
    meter = Meter(device, args.warmup, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    setting = dict(device=device_name, dtype=str(dtype).removeprefix("torch."), attn=args.attn_implementation,
                   torch=torch.__version__, transformers=transformers.__version__)

    rows = []
    for encoder in (e for e in ENCODERS if e.name in chosen):
        module, config = build(encoder, args.tiny, device, dtype, args.attn_implementation)
        for length in seconds:
            inputs = encoder_inputs(encoder, args.tiny, config, length, device, dtype)
            row = dict(encoder=encoder.name, seconds=length)
            try:
                row.update(compare(module, inputs, meter))
            except Exception as error:  # e.g. out of memory: record it, go on with the next
                row["error"] = f"{type(error).__name__}: {error}"
            rows.append(dict(row, **setting))
            print({k: v for k, v in row.items() if k != "changes"}, flush=True)
        if args.profile:
            profile(module, inputs, meter, args.out / f"profile_{encoder.name.split()[0]}.txt")
        del module
        if device.type == "cuda":
            torch.cuda.empty_cache()

    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(args.out / "encoders.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    header = (f"Audio encoders, stock vs kvprune's fast path: {setting['device']}, {setting['dtype']}, {setting['attn']}, "
              f"torch {setting['torch']}, transformers {setting['transformers']}; medians of {args.repeats} after {args.warmup} warm-up rounds.")
    (args.out / "encoders.md").write_text(markdown(rows, header))
    print((args.out / "encoders.md").read_text())


if __name__ == "__main__":
    main()
