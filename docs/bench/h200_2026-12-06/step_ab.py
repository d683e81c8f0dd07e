"""A/B of dependent launches (PDL) in the 7B decode step: the bench's preset and Generator, variants alternated
in one process (each a fresh compilation: torch._dynamo.reset()), per-step ms from the engine's own timing."""
import json, os, sys, time
import torch
import torch._dynamo
from kvprune.harness.bench.presets import PRESETS
from kvprune.generation import gemv
from kvprune.generation.generator import Generator
from kvprune.models import resolve_family

OUT = os.environ.get("OUT", ".")
start = time.time()
cases = [tuple(None if p == "unpruned" else p for p in [c.split(":")[0]]) + (int(c.split(":")[1]),) for c in os.environ.get("CASES", "fastv:64,fastv:16,fastv:1").split(",")]
variants = os.environ.get("VARIANTS", "threads,tma,tma+gates,threads,tma,tma+gates").split(",")
budget = float(sys.argv[1]) if len(sys.argv) > 1 else 420
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
preset = PRESETS.get(os.environ.get("PRESET", "qwen2.5-omni-7b"))
model = preset.build(DEVICE, torch.bfloat16 if DEVICE.type == "cuda" else torch.float32, "sdpa")
prompt = preset.prompt(model, float(os.environ.get("SECONDS", 300)), decode_tokens=1)
suppress = [resolve_family(model).audio_token_id(model)]
import torch._inductor.config as ic
info = dict(card=torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu", torch=torch.__version__, has_enable_pdl=hasattr(ic.triton, "enable_pdl"),
            seq_len=prompt.seq_len)
try:
    import triton; info["triton"] = triton.__version__
except ImportError:
    pass
print(json.dumps(info), flush=True)
results, tokens = [], {}
with open(f"{OUT}/ab_tma.jsonl", "w") as log:
    log.write(json.dumps(info) + "\n")
    for round_, variant in enumerate(variants):
        if time.time() - start > budget:
            print("budget reached; stopping before round", round_, flush=True)
            break
        gemv.TMA_WEIGHTS = variant.startswith("tma")
        gemv.FUSE_GATES = variant.endswith("+gates")
        gemv._TUNED.clear()
        torch._dynamo.reset()
        generator = Generator(model, state_room=1)
        for press, rows in cases:
            generator.forget_states()
            kwargs = dict(max_new_tokens=65, press=press, ratio=0.9 if press else None, eos_token_id=[],
                          suppress_tokens=suppress, pad_token_id=0)
            t0 = time.time()
            try:
                out = generator.generate([prompt.inputs] * rows, **kwargs)
            except Exception as error:  # a variant that fails is recorded, the others still run
                print(json.dumps(dict(round=round_, variant=variant, rows=rows, error=repr(error)[:500])), flush=True)
                continue
            warm = time.time() - t0
            ms = []
            for _ in range(3):
                out = generator.generate([prompt.inputs] * rows, **kwargs)
                ms.append(1000 * out.timing.decode_s / (out.new_tokens.shape[1] - 1))
            key = (press, rows)
            same = None
            if key in tokens:
                same = bool(torch.equal(tokens[key], out.new_tokens.cpu()))
            else:
                tokens[key] = out.new_tokens.cpu()
            row = dict(round=round_, variant=variant, press=press or "unpruned", rows=rows, step_ms=ms,
                       median=sorted(ms)[1], warm_s=round(warm, 1), compiled=out.step_compiled,
                       fallbacks={k: v for r in generator._runners.values() for k, v in r.fallbacks.items()},
                       tokens_equal_first_round=same, elapsed_s=round(time.time() - start))
            print(json.dumps(row), flush=True)
            log.write(json.dumps(row) + "\n"); log.flush()
