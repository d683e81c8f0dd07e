"""Where a pruned prefill spends its time, against the unpruned one and the ideal.

    python -m scripts.profile_prefill --preset qwen2.5-omni-7b --seconds 300 --ratio 0.9

For one GPU: CUDA-event medians of the unpruned and the frame-pruned prefill (frame: no scoring, so
only the engine's own work differs) and of the ideal (the unpruned prefill with layers >= K on the
kept length for free, as ``kvprune bench`` defines it), then a torch.profiler trace of one pruned
prefill: GPU busy time against wall time tells whether the pruned layers run at the GPU's speed or
at the speed the host launches them.
"""

from __future__ import annotations

import argparse
import torch

from kvprune import FramePress
from kvprune.ratios import keep_count
from kvprune.harness.bench.ideal import kept_prefix
from kvprune.harness.bench.measure import Meter
from kvprune.harness.bench.presets import PRESETS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="qwen2.5-omni-7b")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--ratio", type=float, default=0.9)
    parser.add_argument("--layer", type=int, default=2)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    preset = PRESETS.get(args.preset)
    model = preset.build(device, torch.bfloat16 if device.type == "cuda" else torch.float32, "sdpa")
    prompt = preset.prompt(model, args.seconds, 1)
    meter = Meter(device, warmup=3, repeats=9)
    kept_len = prompt.seq_len - prompt.audio_tokens + keep_count(prompt.audio_tokens, args.ratio)

    def prefill():
        with torch.no_grad():
            model(**prompt.inputs, use_cache=True)

    press = FramePress(layer=args.layer, ratio=args.ratio)

    def pruned():
        with press(model):
            prefill()

    def ideal():
        with kept_prefix(model, args.layer, kept_len):
            prefill()

    rows = {
        "unpruned prefill": meter.median_ms(prefill),
        "frame-pruned prefill": meter.median_ms(pruned),
        "ideal (layers >= K on the kept length, for free)": meter.median_ms(ideal),
    }
    for name, ms in rows.items():
        print(f"{name:50s} {ms:8.2f} ms")
    for name, fn in (("unpruned", prefill), ("pruned", pruned)):
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with torch.profiler.profile(activities=activities) as profile:
            fn()
            meter.sync()
        events = profile.key_averages()
        gpu_ms = sum(e.self_device_time_total for e in events) / 1000
        print(f"\n{name}: GPU kernel time {gpu_ms:.1f} ms in total; top host-side operations:")
        print(events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))
        print(events.table(sort_by="self_device_time_total", row_limit=8, max_name_column_width=60))


if __name__ == "__main__":
    main()
