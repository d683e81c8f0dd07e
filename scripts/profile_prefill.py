"""Where the engine's pruned prefill spends its time against its ideal, on one GPU.

    python3 scripts/profile_prefill.py --preset qwen2.5-omni-7b --seconds 300 --method fastv --ratio 0.9 --out DIR

Prefills with kvprune's fast audio encoder, timed as ``kvprune bench`` times them, in interleaved rounds
(CUDA events, medians): the engine's unpruned and pruned prefills (``Generator.generate`` to the first
token with the decode state filled), the ideal (the engine's prefill call whose layers >= K run on the
kept prefix: ``kvprune.harness.bench.ideal``) and the same ideal as a plain forward of the model (its own
position ids and attention mask). Then, for one pruned engine call and one ideal:

* host synchronisations: each one in the pruned engine call, with the kvprune and transformers lines
  that made it (``torch.cuda.set_sync_debug_mode``);
* a profiler trace of each: the GPU's busy time inside the prefill against its span, the host's lead-in
  before the first kernel, kernel launches, and the longest idle gaps with what the host was doing when
  each ended (the Python frames open at the launch that ended it, and any synchronisation before it).
  A gap the host ends is the GPU waiting for the host: launches it cannot queue ahead, or a stall.

Writes profile.md to --out (and with --traces the two Chrome traces, gzipped). On a CPU it runs the same
code on a tiny preset (no kernels: timings and host frames only).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import shutil
import statistics
import tempfile
import time
import traceback
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
SYNC_CALLS = ("Synchronize", "cudaMemcpy", "cudaStreamWaitEvent")  # runtime calls that may block the host
OURS = ("kvprune/", "presses/", "harness/", "transformers/")  # the frames a gap or a synchronisation is attributed to
GAP_US = 50.0  # idle stretches shorter than this are launch latency, not worth a line


@dataclass
class Gap:
    start_ms: float  # from the request's start
    idle_ms: float
    host_bound: bool  # the next kernel was launched after the GPU ran dry
    kernel: str  # what ran after it
    frames: list[str] = field(default_factory=list)  # innermost of ours first, open at that launch
    syncs: list[str] = field(default_factory=list)  # blocking runtime calls during the gap


@dataclass
class TraceSummary:
    span_ms: float  # from the request's start to its last GPU work's end
    busy_ms: float  # the GPU running kernels, copies or memsets (their union)
    lead_in_ms: float  # from the request's start to its first GPU work
    launches: int
    gaps: list[Gap]

    @property
    def idle_ms(self) -> float:
        return self.span_ms - self.busy_ms


def summarize_trace(events: list[dict], start_us: float, end_us: float, top: int = 12) -> TraceSummary:
    """The GPU work launched by the host within [start_us, end_us] (one request, or its prefill) of a
    Chrome trace's events: busy time, idle time, and the ``top`` longest idle gaps with their host context."""
    launch_of = {}
    for event in events:
        correlation = event.get("args", {}).get("correlation")
        if event.get("cat") in ("cuda_runtime", "cuda_driver") and correlation is not None:
            launch_of[correlation] = event
    work = []
    for event in events:
        if event.get("cat") not in GPU_CATEGORIES:
            continue
        launch = launch_of.get(event.get("args", {}).get("correlation"))
        if launch is not None and start_us <= launch["ts"] <= end_us:
            work.append((event["ts"], event["ts"] + event.get("dur", 0.0), event, launch))
    work.sort(key=lambda w: w[0])
    if not work:
        return TraceSummary(0.0, 0.0, 0.0, 0, [])
    python = [e for e in events if e.get("cat") == "python_function" and any(o in e.get("name", "") for o in OURS)]
    blocking = [e for e in events if e.get("cat") == "cuda_runtime" and any(s in e.get("name", "") for s in SYNC_CALLS)]
    busy, gaps, covered_to = 0.0, [], work[0][0]
    for begin, end, event, launch in work:
        if begin > covered_to:
            if begin - covered_to >= GAP_US:
                gaps.append(_gap(covered_to, begin, event, launch, python, blocking, start_us))
            covered_to = begin
        busy += max(0.0, end - covered_to)
        covered_to = max(covered_to, end)
    gaps.sort(key=lambda g: -g.idle_ms)
    return TraceSummary(
        span_ms=(covered_to - start_us) / 1000, busy_ms=busy / 1000, lead_in_ms=(work[0][0] - start_us) / 1000,
        launches=len(work), gaps=gaps[:top],
    )


def _gap(idle_from: float, idle_to: float, event: dict, launch: dict, python, blocking, start_us: float) -> Gap:
    at = launch["ts"]
    open_frames = sorted((e for e in python if e["ts"] <= at <= e["ts"] + e.get("dur", 0.0)), key=lambda e: e.get("dur", 0.0))
    syncs = [f"{e['name']} {e.get('dur', 0.0) / 1000:.2f} ms" for e in blocking
             if e["ts"] < at and e["ts"] + e.get("dur", 0.0) > idle_from]
    return Gap(
        start_ms=(idle_from - start_us) / 1000, idle_ms=(idle_to - idle_from) / 1000, host_bound=at > idle_from,
        kernel=event.get("name", "")[:60], frames=[_short(e["name"]) for e in open_frames[:3]], syncs=syncs[:3],
    )


def _short(frame: str) -> str:
    """``/long/path/site-packages/transformers/x.py(12): f`` -> ``transformers/x.py(12): f``."""
    for root in OURS:
        if root in frame:
            return root + frame.split(root, 1)[1]
    return frame


# -- measuring -----------------------------------------------------------------------------------------
#: contexts entered where the engine's decoding starts and left where it ends, made per call (``around_decoding``)
DECODING_CONTEXTS: list = []


@contextmanager
def around_decoding(context):
    """Inside, every call of the engine's decoding (under ``DecodingProbes``) runs inside ``context()`` (a context
    manager made per call): where a request's prefill ends, for instruments."""
    DECODING_CONTEXTS.append(context)
    try:
        yield
    finally:
        DECODING_CONTEXTS.remove(context)


def annotated_decoding():
    """Marks the engine's decoding in profiler traces, so that a request's prefill ends where it begins."""
    return around_decoding(lambda: torch.profiler.record_function("kvprune.decode"))


def decoding_probes():
    """The bench's ``Probes`` with the engine's decoding observed: ``around_decoding``'s contexts around it."""
    from kvprune.harness.bench.measure import Probes

    class DecodingProbes(Probes):
        def decoding_started(self) -> None:
            self._open = [context() for context in DECODING_CONTEXTS]
            for opened in self._open:
                opened.__enter__()

        def decoding_ended(self) -> None:
            for opened in reversed(self._open):
                opened.__exit__(None, None, None)

    return DecodingProbes


class HostLead:
    """How far ahead of the GPU the host runs at points of a call: the host's time of reaching each point
    against the GPU's (a CUDA event recorded there), both counted from a common start after a
    synchronisation. A lead near zero is a GPU waiting for the host's launches: the lead left where the
    short layers after a press begin is what keeps them from waiting. Cheap enough to run in every round.
    ``kvprune bench`` reports the first three points in every row (``host_lead_encoder_ms``, ``host_lead_k_ms``,
    ``host_lead_end_ms``, from its own marks); this adds decoding's start and when the host reached each point, in
    rounds of their own."""

    def __init__(self, model, layer: int):
        from kvprune.models import resolve_family

        family = resolve_family(model)
        layers = family.layers(model)
        self.points = [
            ("audio encoder's end", family.audio_encoder(model)[1], "register_forward_hook"),
            (f"layer {layer}'s start", layers[layer], "register_forward_pre_hook"),
            ("last layer's end", layers[-1], "register_forward_hook"),
        ]
        self.names = [name for name, _, _ in self.points] + [DECODING]
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.host_ms: dict[str, dict[str, list[float]]] = {}  # when the host reached each point, from the start

    @contextmanager
    def watching(self, run_name: str):
        """Inside, the first pass through each point (decoding runs the layers again) is marked for ``run_name``."""
        marks: dict[str, tuple[float, torch.cuda.Event]] = {}

        def mark(name: str) -> None:
            if name not in marks:
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                marks[name] = (time.perf_counter(), event)

        @contextmanager
        def decoding():
            mark(DECODING)
            yield

        handles = [getattr(module, register)(lambda *_, n=name: mark(n)) for name, module, register in self.points]
        torch.cuda.synchronize()
        start, host_start = torch.cuda.Event(enable_timing=True), time.perf_counter()
        start.record()
        try:
            with around_decoding(decoding):
                yield
        finally:
            for handle in handles:
                handle.remove()
        torch.cuda.synchronize()
        leads, hosts = self.samples.setdefault(run_name, {}), self.host_ms.setdefault(run_name, {})
        for name, (host_time, event) in marks.items():
            leads.setdefault(name, []).append(start.elapsed_time(event) - 1000 * (host_time - host_start))
            hosts.setdefault(name, []).append(1000 * (host_time - host_start))

    def rows(self) -> list[str]:
        """The lead at each point (one row per run)."""
        return self._table(self.samples)

    def host_rows(self) -> list[str]:
        """When the host reached each point, from the call's start (one row per run): where a run that is
        host-bound spends its host's time, point to point, against another's."""
        return self._table(self.host_ms)

    def _table(self, samples: dict[str, dict[str, list[float]]]) -> list[str]:
        lines = ["| run | " + " | ".join(f"at the {name}" for name in self.names) + " |",
                 "|---|" + "---|" * len(self.names)]
        for run_name, values in samples.items():
            cells = [f"{statistics.median(values[n]):.1f}" if n in values else "—" for n in self.names]
            lines.append(f"| {run_name} | " + " | ".join(cells) + " |")
        return lines


DECODING = "decoding's start (the engine)"


class GcPauses:
    """The garbage collector's pauses inside a block (``gc.callbacks``): a host-bound call loses each one whole,
    and a collection of the oldest generation walks every object the process holds (after compilations, many)."""

    def __init__(self):
        self.ms = 0.0
        self.oldest = 0  # collections of generation 2
        self._started = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.ms += 1000 * (time.perf_counter() - self._started)
            self.oldest += info.get("generation") == 2

    def __enter__(self) -> "GcPauses":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._callback)


def host_syncs(run) -> dict[str, int]:
    """Each place ``run()`` synchronised the host with the GPU (its innermost kvprune and transformers
    lines), with how often."""
    found: dict[str, int] = {}

    def show(message, category, filename, lineno, file=None, line=None):
        if "synchronizing" not in str(message).lower():
            return
        stack = [f for f in traceback.extract_stack()[:-1] if any(o in f.filename for o in OURS)]
        ours = [f for f in stack if "transformers/" not in f.filename][-1:] + [f for f in stack if "transformers/" in f.filename][-1:]
        where = " <- ".join(f"{_short(f.filename)}:{f.lineno} {f.name}" for f in ours) or "(outside kvprune and transformers)"
        found[where] = found.get(where, 0) + 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        previous, warnings.showwarning = warnings.showwarning, show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = previous
    return found


def traced(run, device: torch.device, trace_path: Path | None) -> tuple[TraceSummary, Path]:
    """One ``run()`` under the profiler, summarized up to the engine's decoding (if it decodes)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with annotated_decoding(), torch.profiler.profile(activities=activities, with_stack=True) as profile:
        with torch.profiler.record_function("kvprune.request"):
            run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    path = trace_path or Path(tempfile.mkstemp(suffix=".json")[1])
    profile.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    marks = {e["name"]: e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("kvprune.")}
    request = marks["kvprune.request"]
    end = marks["kvprune.decode"]["ts"] if "kvprune.decode" in marks else request["ts"] + request["dur"]
    return summarize_trace(events, request["ts"], end), path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=None, help="default: qwen2.5-omni-7b on a GPU, tiny-omni on a CPU")
    parser.add_argument("--seconds", type=float, default=None, help="audio length (default: 300 on a GPU, 2 on a CPU)")
    parser.add_argument("--method", default="fastv")
    parser.add_argument("--ratio", type=float, default=0.9)
    parser.add_argument("--layer", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--traces", action="store_true", help="keep both Chrome traces (gzipped) in --out")
    parser.add_argument("--compiled", action="store_true",
                        help="the engine as kvprune bench runs it (compiled decoding step, CUDA graphs) instead of uncompiled")
    parser.add_argument("--decode-tokens", type=int, default=2, help="new tokens per engine call (default 2: one step)")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() after the warm-up rounds (the garbage collector never walks what they made)")
    return parser.parse_args(argv)


def main() -> None:
    print("\n".join(profile(parse_args())))


def profile(args) -> list[str]:
    from kvprune import Generator, fast_audio_encoder
    from kvprune.harness.bench.ideal import kept_prefix
    from kvprune.harness.bench.measure import Meter, Probes
    from kvprune.harness.bench.presets import PRESETS
    from kvprune.keep_rules import keep_count
    from kvprune.specs import parse_method

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    preset = PRESETS.get(args.preset or ("qwen2.5-omni-7b" if cuda else "tiny-omni"))
    seconds = args.seconds if args.seconds is not None else (300.0 if cuda else 2.0)
    model = preset.build(device, torch.bfloat16 if cuda else torch.float32, "sdpa")
    prompt = preset.prompt(model, seconds, decode_tokens=args.decode_tokens)
    meter = Meter(device, warmup=args.warmup, repeats=args.repeats)
    # by default one uncompiled decoding step: the prefill is what counts
    generator = Generator(model) if args.compiled else Generator(model, compile=False, cuda_graphs=False)
    press = parse_method(args.method).build(args.ratio, args.layer)
    keep = prompt.seq_len - prompt.audio_tokens + keep_count(prompt.audio_tokens, args.ratio)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    def engine(pressed):
        def run():
            probes = decoding_probes()(meter.clock, model, args.layer)
            try:
                return meter.engine_request(generator, prompt, probes, pressed)[0]
            finally:
                probes.close()
        return run

    def ideal(through_engine: bool):
        def run():
            probes = Probes(meter.clock, model, args.layer)
            try:
                with kept_prefix(model, args.layer, keep):
                    if through_engine:
                        return meter.request(model, prompt, probes, "engine", decode=False)
                    return meter.request(model, prompt, probes, "dynamic", decode=False)
            finally:
                probes.close()
        return run

    runs = {"engine, unpruned": engine(None), f"engine, {args.method} {args.ratio:g}": engine(press),
            f"ideal {args.ratio:g}": ideal(True), f"ideal {args.ratio:g} as a plain forward": ideal(False)}
    with ExitStack() as stack:
        stack.enter_context(fast_audio_encoder(model))
        samples = {name: [] for name in runs}
        lead = HostLead(model, args.layer) if cuda else None
        for round_ in range(args.warmup + args.repeats):
            for name, run in runs.items():
                if round_ >= args.warmup and lead is not None and name != "engine, unpruned":
                    with lead.watching(name):
                        run()
                with GcPauses() as pauses:
                    timing = run()
                if round_ >= args.warmup:
                    samples[name].append((timing.prefill_ms, timing.encoder_ms, timing.host_loop_ns, pauses.ms, pauses.oldest))
            if round_ + 1 == args.warmup and args.gc_freeze:
                gc.freeze()  # what the warm-up made (compiled code, graphs) is never walked again
        pruned_name, ideal_name = list(runs)[1:3]
        syncs = host_syncs(runs[pruned_name]) if cuda else {}
        summaries = {}
        for name in (pruned_name, ideal_name):
            path = out / f"trace_{name.split(',')[0].split()[0]}.json"
            summaries[name], path = traced(runs[name], device, path)
            if args.traces:
                with open(path, "rb") as raw, gzip.open(f"{path}.gz", "wb") as packed:
                    shutil.copyfileobj(raw, packed)
            path.unlink()
    lines = _report(args, preset.name, seconds, prompt, keep, samples, lead, syncs, summaries, device)
    (out / "profile.md").write_text("\n".join(lines) + "\n")
    return lines


def _report(args, preset, seconds, prompt, keep, samples, lead, syncs, summaries, device) -> list[str]:
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    lines = [
        f"# The engine's prefill against its ideal: {preset}, {seconds:g} s of audio ({prompt.seq_len} prompt tokens, "
        f"{keep} kept at {args.ratio:g}), {args.method}, K = {args.layer}",
        "",
        f"- {card}; torch {torch.__version__}; medians of {args.repeats} interleaved rounds after {args.warmup}"
        + ("; gc.freeze() after the warm-up" if args.gc_freeze else ""),
        "",
        "| prefill | ms | encoder ms | LLM ms | host loop ns (its speed before the call) | GC pauses ms per call "
        "(median; most) | collections of the oldest generation |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, values in samples.items():
        prefill, encoder, host, pauses = (statistics.median(v[i] for v in values) for i in (0, 1, 2, 3))
        lines.append(f"| {name} | {prefill:.1f} | {encoder:.1f} | {prefill - encoder:.1f} | {host:.1f} | "
                     f"{pauses:.2f}; {max(v[3] for v in values):.2f} | {sum(v[4] for v in values)} in {len(values)} calls |")
    if lead is not None:
        lines += ["", "## How far ahead of the GPU the host is (ms, medians; near 0: the GPU waits for launches)", "",
                  *lead.rows(), "", "(from rounds of their own, beside the timed ones)", "",
                  "## When the host reached each point (ms from the call's start, medians of the same rounds)", "",
                  *lead.host_rows()]
    lines += ["", "## Host synchronisations in one pruned engine call (before its decoding, and in it)", ""]
    if device.type != "cuda":
        lines.append("(not looked for on a CPU)")
    else:
        lines += [f"- {count}x {where}" for where, count in sorted(syncs.items(), key=lambda kv: -kv[1])] or ["- none"]
    for name, summary in summaries.items():
        lines += [
            "", f"## Trace: {name}", "",
            f"span {summary.span_ms:.1f} ms (request start to its last GPU work), GPU busy {summary.busy_ms:.1f} ms, "
            f"idle {summary.idle_ms:.1f} ms, of it {summary.lead_in_ms:.1f} ms before the first kernel; "
            f"{summary.launches} kernels, copies and memsets",
            "", "| at ms | idle ms | ended by | next kernel | host frames at that launch (innermost first) | blocking calls |",
            "|---|---|---|---|---|---|",
        ]
        for gap in summary.gaps:
            lines.append(f"| {gap.start_ms:.1f} | {gap.idle_ms:.2f} | {'host' if gap.host_bound else 'device'} | "
                         f"{gap.kernel} | {'<br>'.join(gap.frames)} | {'<br>'.join(gap.syncs)} |")
    return lines


if __name__ == "__main__":
    main()
