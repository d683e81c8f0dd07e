"""kvprune's benchmarks on one GPU: the passes the docs report, each device call at most ~9 minutes.

    python3 scripts/gpu_session.py --out "$OUT" --passes targets,cache --minutes 8.5      # one H100/H200
    python3 scripts/gpu_session.py --out "$OUT" --passes others,families,gemma --minutes 8.5
    python3 scripts/gpu_session.py --tiny --out /tmp/session     # every pass, tiny presets, on a CPU

Nothing is downloaded or installed: every model is built from its config with random weights. The
passes run in the order given, each a ``kvprune bench`` in its own process (a failure stays in its
pass) that starts no request after its deadline (``--max-minutes``: the least of the pass's cap and
what is left of ``--minutes``); the rounds timed by then are what the medians use, and a request
never timed is recorded as a skipped row.

1. targets: ``--compare-stock`` at the Qwen2.5-Omni-7B shape with 5 min of audio: stock Hugging Face
   unpruned (dynamic cache, then its static-cache compile), kvprune unpruned (fast encoder, the
   generation engine), FastV at 0.5 and 0.9 (the same), the ideal; the targets as ratios.
2. cache: every cache press and one composition at 0.5, 7B, 5 min: the press's own work in
   the prefill (and its share), KV bytes and decode time against unpruned (the engine).
3. batch: 7B, 2 min, FastV at 0.9 against unpruned at batch 1, 16 and 64 through the engine
   (requests/s, tokens/s, peak memory) and the largest batch each fits, with its throughput.
4. others: ``--compare-stock`` at 5 min for aero-1-audio-1.5b, voxtral-mini-3b, phi4-mm and
   qwen2.5-omni-3b, lighter (1 warm-up round, 3 timed, 16 tokens).
5. families: the newer families' presets at 5 min (Audio Flamingo 3, Granite Speech, Qwen3-Omni),
   FastV and frame against unpruned; 6. gemma: Gemma-3n E4B at 30 s, its longest clip.

Writes to ``--out``: env.txt, log.txt, one markdown table per pass that ran (targets.md with
targets.png, cache_presses.md, batch.md, other_presets.md, new_families.md, gemma3n.md) and bench.csv
(every row of every pass; ``mode`` and ``command`` tell the passes apart): at most 8 files for the
passes of one device call as above.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MAIN, OTHERS = "qwen2.5-omni-7b", "aero-1-audio-1.5b,voxtral-mini-3b,phi4-mm,qwen2.5-omni-3b"
TINY_SECONDS = {"300": "2", "120": "1", "30": "1"}
NEW_FAMILIES = "audio-flamingo-3,granite-speech-3.3-8b,qwen3-omni-30b-a3b"  # at 5 min; Gemma-3n takes 30 s at most
CACHE_METHODS = "knorm,random_kv,tova,snapkv,streaming_llm,expected_attention,pyramidkv,adakv,frame+knorm"


@dataclass(frozen=True)
class Pass:
    name: str
    args: str  # kvprune bench arguments (without --out, --max-minutes, --quiet)
    cap_minutes: float  # the most this pass may take
    min_minutes: float  # below this much time left, it is skipped
    markdown: str  # the file its bench.md becomes
    figure: str | None = None  # the file its figure becomes, if kept


def passes(others: str) -> list[Pass]:
    return [
        Pass("targets", f"--compare-stock --preset {MAIN} --audio-seconds 300 --methods fastv --ratios 0.5,0.9 "
             "--warmup 2 --repeats 5 --decode-tokens 32", 4.5, 1.0, "targets.md", "targets.png"),
        Pass("cache", f"--preset {MAIN} --audio-seconds 300 --methods {CACHE_METHODS} --ratios 0.5 "
             "--warmup 1 --repeats 3 --decode-tokens 16", 2.0, 0.5, "cache_presses.md"),
        Pass("batch", f"--preset {MAIN} --audio-seconds 120 --methods fastv --ratios 0.9 --batch-sizes 1,16,64 "
             "--largest-batch --warmup 1 --repeats 2 --decode-tokens 32", 3.0, 0.5, "batch.md"),
        Pass("others", f"--compare-stock --preset {others} --audio-seconds 300 --methods fastv --ratios 0.5,0.9 "
             "--warmup 1 --repeats 3 --decode-tokens 16", 10.0, 1.0, "other_presets.md"),
        Pass("families", f"--preset {NEW_FAMILIES} --audio-seconds 300 --methods fastv,frame --ratios 0.5,0.9 "
             "--warmup 1 --repeats 3 --decode-tokens 16", 5.0, 1.0, "new_families.md"),
        Pass("gemma", "--preset gemma-3n-e4b --audio-seconds 30 --methods fastv,frame --ratios 0.5,0.9 "
             "--decoding dynamic --warmup 1 --repeats 3 --decode-tokens 16", 2.0, 0.5, "gemma3n.md"),
    ]


def tiny(args: str) -> str:
    """The same pass on the CPU: each preset's family's tiny preset, seconds of audio, one round."""
    from kvprune.harness.bench.presets import PRESETS
    from kvprune.harness.bench.shapes import shapes_of

    words = args.split()

    def swap(flag: str, change) -> None:
        at = words.index(flag) + 1
        words[at] = ",".join(change(part) for part in words[at].split(","))

    swap("--preset", lambda name: shapes_of(PRESETS.get(name).family).tiny_preset)
    swap("--audio-seconds", TINY_SECONDS.get)
    for flag, value in (("--warmup", "0"), ("--repeats", "1"), ("--decode-tokens", "2")):
        words[words.index(flag) + 1] = value
    return " ".join([*words, "--device", "cpu"])


class Session:
    def __init__(self, out: Path, minutes: float, in_process: bool):
        self.out = out
        self.deadline = time.monotonic() + 60 * minutes
        self.in_process = in_process
        out.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "log.txt", "a")

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def minutes_left(self) -> float:
        return max(0.0, (self.deadline - time.monotonic()) / 60)

    def bench(self, argv: list[str]) -> int:
        """One ``kvprune bench``: in its own process (on a GPU, so that a crash stays in its pass), or
        in this one (tests)."""
        if self.in_process:
            from kvprune.harness.cli import main

            return main(["bench", *argv])
        # from outside the repository: ``-m`` puts the working folder first on sys.path, and the source
        # tree's kvprune/ lacks kvprune.presses and kvprune.harness (installed from presses/ and harness/)
        process = subprocess.run([sys.executable, "-m", "kvprune.harness.cli", "bench", *argv], cwd=tempfile.gettempdir(),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.say(process.stdout.rstrip())
        return process.returncode

    def run(self, todo: list[Pass], scratch: Path, is_tiny: bool) -> list[Path]:
        tables = []
        for step in todo:
            left = self.minutes_left()
            if left < step.min_minutes:
                self.say(f"== {step.name}: skipped, {left:.1f} min left")
                continue
            folder = scratch / step.name
            args = tiny(step.args) if is_tiny else step.args
            minutes = min(step.cap_minutes, left)
            self.say(f"== {step.name}: kvprune bench {args} --max-minutes {minutes:.2f}")
            started = time.monotonic()
            status = self.bench([*args.split(), "--quiet", "--out", str(folder), "--max-minutes", f"{minutes:.2f}"])
            self.say(f"== {step.name}: exit {status}, {time.monotonic() - started:.0f} s")
            if (folder / "bench.md").exists():
                shutil.copy(folder / "bench.md", self.out / step.markdown)
                tables.append(folder / "bench.csv")
            if step.figure and (folder / "prefill_vs_ratio.png").exists():
                shutil.copy(folder / "prefill_vs_ratio.png", self.out / step.figure)
        return tables


def environment(out: Path, is_tiny: bool) -> None:
    lines = []
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm", "--format=csv"]
        lines.append(subprocess.run(query, capture_output=True, text=True).stdout.strip())
    import torch
    import transformers

    import kvprune

    lines += [f"python {sys.version.split()[0]}", f"torch {torch.__version__} cuda {torch.version.cuda}",
              f"transformers {transformers.__version__}", f"kvprune {kvprune.__version__}", f"tiny {is_tiny}"]
    (out / "env.txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the (at most 8) files")
    parser.add_argument("--minutes", type=float, default=7.5,
                        help="the session's budget; a request started before its pass's deadline still finishes (a "
                        "first compile can take a minute), so 7.5 (the default) fits a 9-minute call")
    parser.add_argument("--passes", default="targets,cache,batch,others", help="which passes, run in the order given")
    parser.add_argument("--others", default=OTHERS, help="the presets of the others pass")
    parser.add_argument("--tiny", action="store_true", help="tiny presets on the CPU (a check of the session, in seconds)")
    parser.add_argument("--in-process", action="store_true", help="run the passes in this process (tests)")
    args = parser.parse_args(argv)

    session = Session(args.out, args.minutes, args.in_process)
    environment(args.out, args.tiny)
    known = {p.name: p for p in passes(args.others)}
    unknown = [name for name in args.passes.split(",") if name not in known]
    if unknown:
        parser.error(f"unknown pass(es) {', '.join(unknown)}; the passes are {', '.join(known)}")
    todo = [known[name] for name in args.passes.split(",")]  # in the order given
    with tempfile.TemporaryDirectory() as scratch:
        tables = session.run(todo, Path(scratch), args.tiny)
        if tables:
            import pandas as pd

            pd.concat([pd.read_csv(path) for path in tables]).to_csv(args.out / "bench.csv", index=False)
    session.say(f"== done: {', '.join(sorted(p.name for p in args.out.iterdir()))}")
    session.log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
