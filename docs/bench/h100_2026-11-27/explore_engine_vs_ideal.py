"""Why the bench's engine prefill at 0.9 is slower than the profile script's: compiled generator? stock rows?"""
import statistics, sys, time, torch
sys.path.insert(0, sys.argv[1] + "/scripts")
import profile_prefill as pp
from kvprune import Generator, fast_audio_encoder
from kvprune.harness.bench.ideal import kept_prefix
from kvprune.harness.bench.measure import Meter, Probes
from kvprune.harness.bench.presets import PRESETS
from kvprune.ratios import keep_count
from kvprune.specs import parse_method

dev = torch.device("cuda")
preset = PRESETS.get("qwen2.5-omni-7b")
model = preset.build(dev, torch.bfloat16, "sdpa")
p2 = preset.prompt(model, 300, decode_tokens=2)
p32 = preset.prompt(model, 300, decode_tokens=32)
meter = Meter(dev, warmup=0, repeats=1)
g_eager = Generator(model, compile=False, cuda_graphs=False)
g_comp = Generator(model)
press = parse_method("fastv").build(0.9, 2)
keep = p2.seq_len - p2.audio_tokens + keep_count(p2.audio_tokens, 0.9)

def engine(gen, prompt, pr):
    def run():
        probes = Probes(meter.clock, model, 2)
        try:
            return meter.engine_request(gen, prompt, probes, pr)[0]
        finally:
            probes.close()
    return run

def ideal():
    probes = Probes(meter.clock, model, 2)
    try:
        with kept_prefix(model, 2, keep):
            return meter.engine_prefill(model, p2, probes)
    finally:
        probes.close()

def stock():
    probes = Probes(meter.clock, model, 2)
    try:
        return meter.generate_request(model, p32, probes, "static")
    finally:
        probes.close()

runs = {"A eager gen, 2 tok": engine(g_eager, p2, press), "B compiled gen, 32 tok": engine(g_comp, p32, press),
        "E compiled gen, 2 tok": engine(g_comp, p2, press), "F compiled gen unpruned 32": engine(g_comp, p32, None),
        "C ideal": ideal}
lead = pp.HostLead(model, 2)
import gc
gc_ms = []
_t = {}
def _cb(phase, info):
    if phase == "start": _t["s"] = time.perf_counter()
    else: gc_ms.append((info["generation"], 1000 * (time.perf_counter() - _t["s"])))
gc.callbacks.append(_cb)
def paused(run):
    def inner():
        gc.disable()
        try: return run()
        finally: gc.enable()
    return inner
runs = {"B compiled gen, 32 tok": runs["B compiled gen, 32 tok"], "G B with gc paused": paused(runs["B compiled gen, 32 tok"]),
        "C ideal": ideal, "H ideal gc paused": paused(ideal)}
gc_by_run = {}
for phase, extra in (("with stock static", {"D stock static": stock, "D2 stock dynamic": lambda: meter.generate_request(model, p32, Probes(meter.clock, model, 2), "dynamic")}),):
    allruns = {**runs, **extra}
    samples = {n: [] for n in allruns}
    t0 = time.time()
    for r in range(3 + 8):
        for name, run in allruns.items():
            fast = fast_audio_encoder(model) if not name.startswith("D") else None
            try:
                if r >= 3 and not name.startswith("D") and not name.startswith("F"):
                    with lead.watching(f"{phase}: {name}"):
                        run()
                before = len(gc_ms)
                t = run()
                if r >= 3:
                    gc_by_run.setdefault(name, []).append([g for g in gc_ms[before:]])
            finally:
                if fast: fast.remove()
            if r >= 3:
                samples[name].append((t.prefill_ms, t.head_ms, t.encoder_ms))
    print(f"== {phase} ({time.time()-t0:.0f} s)")
    for name, v in samples.items():
        med = [statistics.median(x[i] for x in v) for i in range(3)]
        print(f"{name:32s} prefill {med[0]:7.1f} head {med[1]:6.1f} encoder {med[2]:6.1f} LLM {med[0]-med[2]:6.1f}  all prefill {[round(x[0],1) for x in v]}")
print("\n".join(lead.rows()))
for name, v in gc_by_run.items():
    print(f"GC during {name}: per call total ms {[round(sum(x for _, x in c), 1) for c in v]}; max gen {[max([g for g, _ in c], default=-1) for c in v]}")
