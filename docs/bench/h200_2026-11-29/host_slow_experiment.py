"""Why an eager prefill runs slower on the host once the engine's decode step was compiled in the process.

    python3 host_slow_experiment.py phi4-mm            # call 4: a gc.freeze() stage
    python3 host_slow_experiment.py phi4-mm --threads  # call 5: per-thread and child CPU logged before each
                                                       # stage, 20 s asleep instead of the gc.freeze() stage
"""
import gc, os, statistics, sys, threading, time
import torch
from kvprune import Generator, fast_audio_encoder
from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.bench.ideal import kept_prefix
from kvprune.harness.bench.measure import Meter, Probes
from kvprune.keep_rules import keep_count
from kvprune.specs import parse_method

dev = torch.device("cuda")
name = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "phi4-mm"
THREADS = "--threads" in sys.argv
preset = PRESETS.get(name)
model = preset.build(dev, torch.bfloat16, "sdpa")
prompt = preset.prompt(model, 300.0, decode_tokens=16)
meter = Meter(dev, warmup=2, repeats=9)
keep = prompt.seq_len - prompt.audio_tokens + keep_count(prompt.audio_tokens, 0.9)
press = parse_method("fastv").build(0.9, 2)


def ideal():
    probes = Probes(meter.clock, model, 2)
    try:
        with kept_prefix(model, 2, keep):
            return meter.request(model, prompt, probes, "engine", decode=False)
    finally:
        probes.close()


def micro():
    x = torch.ones(8, device=dev)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(3000):
        x = x + 1
    host = (time.perf_counter() - t) / 3000 * 1e6
    torch.cuda.synchronize()
    t = time.perf_counter()
    s = 0
    for i in range(300000):
        s += i
    py = (time.perf_counter() - t) / 300000 * 1e9
    return host, py


def busy():
    """CPU seconds per wall second over 1 s of idling: this process's threads (by id), its children (summed)."""
    import psutil
    me = psutil.Process()
    kids = me.children(recursive=True)
    t0 = {t.id: t.user_time + t.system_time for t in me.threads()}
    k0 = {k.pid: sum(k.cpu_times()[:2]) for k in kids}
    time.sleep(1.0)
    t1 = {t.id: t.user_time + t.system_time for t in me.threads()}
    k1 = {}
    for k in kids:
        try:
            k1[k.pid] = sum(k.cpu_times()[:2])
        except Exception:
            pass
    threads = sorted(((round(t1[i] - t0.get(i, 0), 2), i) for i in t1), reverse=True)[:4]
    native = {t.native_id: t.name for t in threading.enumerate()}
    kid = sum(k1[p] - k0[p] for p in k1)
    import traceback
    frames = sys._current_frames()
    for t in threading.enumerate():
        if t is threading.main_thread() or t.ident not in frames:
            continue
        stack = traceback.extract_stack(frames[t.ident])[-3:]
        print("     thread", t.name, t.native_id, " <- ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno} {f.name}" for f in reversed(stack)))
    return f"threads busy {[(b, native.get(i, i)) for b, i in threads]}  children busy {kid:.2f}"


def measure(tag):
    if THREADS:
        print("   idle:", busy(), flush=True)
    rows = [ideal() for _ in range(11)][2:]
    med = lambda f: statistics.median(f(r) for r in rows)
    us, ns = micro()
    try:
        import psutil
        kids = len(psutil.Process().children(recursive=True))
    except Exception:
        kids = -1
    print(f"{tag:34s} prefill {med(lambda r: r.prefill_ms):6.1f}  LLM {med(lambda r: r.prefill_ms - r.encoder_ms):5.1f}  "
          f"lead enc/K {med(lambda r: r.host_lead_encoder_ms):5.1f}/{med(lambda r: r.host_lead_k_ms):5.1f}  "
          f"add launch {us:5.2f} us  py loop {ns:5.1f} ns  objects {len(gc.get_objects()):,}  threads {threading.active_count()}  children {kids}", flush=True)


with fast_audio_encoder(model):
    measure("fresh")
    eager = Generator(model, compile=False, cuda_graphs=False)
    for _ in range(2):
        eager.generate([prompt.inputs], max_new_tokens=16, press=press, eos_token_id=[], pad_token_id=0)
    measure("after the eager engine")
    compiled = Generator(model)
    for p in (None, press, None, press):
        compiled.generate([prompt.inputs], max_new_tokens=16, press=p, eos_token_id=[], pad_token_id=0)
    measure("after the compiled engine")
    measure("again")
    if THREADS:
        time.sleep(20)
        measure("after 20 s asleep")
    else:
        gc.collect(); gc.freeze()
        measure("after gc.freeze")
        gc.unfreeze()
    try:
        from torch._inductor.async_compile import shutdown_compile_workers
        shutdown_compile_workers()
        measure("after shutting compile workers")
    except Exception as e:
        print("no shutdown:", e)
    compiled.generate([prompt.inputs], max_new_tokens=16, press=press, eos_token_id=[], pad_token_id=0)
    measure("after one more compiled call")
