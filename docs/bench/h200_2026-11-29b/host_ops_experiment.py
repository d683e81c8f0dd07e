"""How long the engine's host bookkeeping ops take on a GPU machine's CPU: small CPU tensor ops of one 3,822-token prompt
(Phi-4's at 300 s), each timed many times, with torch's default intra-op threads and with one.

    python3 host_ops_experiment.py [--calls 2000] [--after-compile]

Prints per op the median, 99th percentile and largest time in microseconds. A profile of the engine's prefill on an H200
(2026-11-29) found one ``ids[mask]`` of this size taking 5.1 ms; this says whether such stalls are the op's or the
threads'.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

LENGTH = 3822


def ops() -> dict:
    ids = torch.randint(0, 200_000, (1, LENGTH))
    mask = torch.ones(1, LENGTH, dtype=torch.bool)
    audio = torch.zeros(1, LENGTH, dtype=torch.bool)
    audio[:, 20:3800] = True
    return {
        "ids[mask] (boolean index)": lambda: ids[0][mask[0]],
        "mask.long().cumsum(1)": lambda: mask.long().cumsum(dim=1),
        "(~audio).sum(-1).tolist()": lambda: (~audio).sum(dim=-1).tolist(),
        "audio.nonzero()": lambda: audio.nonzero(),
        "ids == token": lambda: ids == 151_646,
        "torch.where(audio, 1, 0)": lambda: torch.where(audio, 1, 0),
    }


def timed(fn, calls: int) -> list[float]:
    for _ in range(20):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(1e6 * (time.perf_counter() - start))
    return sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--after-compile", action="store_true",
                        help="first compile a small function with torch.compile on the GPU (Inductor's worker pool alive)")
    args = parser.parse_args()
    if args.after_compile:
        compiled = torch.compile(lambda x: (x.sin() + x.cos()).softmax(-1) @ x)
        for n in (64, 96, 128):
            compiled(torch.randn(n, n, device="cuda"))
        torch.cuda.synchronize()
        print("compiled three shapes first (Inductor's compile workers started)")
    default = torch.get_num_threads()
    print(f"torch {torch.__version__}, {default} intra-op threads by default; {args.calls} calls per op\n")
    print("| op | threads | median us | p99 us | largest us |")
    print("|---|---|---|---|---|")
    for threads in (default, 1, default):
        torch.set_num_threads(threads)
        for name, fn in ops().items():
            t = timed(fn, args.calls)
            print(f"| {name} | {threads} | {statistics.median(t):.1f} | {t[int(0.99 * len(t))]:.1f} | {t[-1]:.1f} |")
    torch.set_num_threads(default)


if __name__ == "__main__":
    main()
