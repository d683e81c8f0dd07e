"""End to end: the unpruned 7B step at 139 rows (and FastV 0.9 at 139) with one split beyond one wave (the rule
before) and with tail_splits, alternated in one process; per-step ms from the engine's timing."""
import json, os, time
import torch
from kvprune.harness.bench.presets import PRESETS
from kvprune.generation import decode_attention as fused
from kvprune.generation.generator import Generator
from kvprune.models import resolve_family

OUT = os.environ.get("OUT", ".")
new_rule = fused.split_aim
def old_rule(batch, kv_heads, processors):
    return max(1, min(fused.PROGRAMS_PER_PROCESSOR * processors // (batch * kv_heads), fused.MAX_SPLITS))
preset = PRESETS.get("qwen2.5-omni-7b")
model = preset.build(torch.device("cuda"), torch.bfloat16, "sdpa")
prompt = preset.prompt(model, 300, decode_tokens=1)
suppress = [resolve_family(model).audio_token_id(model)]
generator = Generator(model, state_room=1)
start, tokens = time.time(), {}
with open(f"{OUT}/ab_tail.jsonl", "w") as log:
    for press, rows in [(None, 139), ("fastv", 139)]:
        for variant in ["old", "tail", "old", "tail"]:
            if time.time() - start > 200:
                break
            fused.split_aim = old_rule if variant == "old" else new_rule
            generator.forget_states()
            kwargs = dict(max_new_tokens=33, press=press, ratio=0.9 if press else None, eos_token_id=[],
                          suppress_tokens=suppress, pad_token_id=0)
            out = generator.generate([prompt.inputs] * rows, **kwargs)
            ms = []
            for _ in range(2):
                out = generator.generate([prompt.inputs] * rows, **kwargs)
                ms.append(1000 * out.timing.decode_s / (out.new_tokens.shape[1] - 1))
            key = (press, variant)
            same = bool(torch.equal(tokens[key], out.new_tokens.cpu())) if key in tokens else None
            tokens.setdefault(key, out.new_tokens.cpu())
            row = dict(variant=variant, press=press or "unpruned", rows=rows, aim=fused.split_aim(rows, 4, 132), step_ms=ms,
                       compiled=out.step_compiled, same_tokens_as_own_first=same, elapsed_s=round(time.time() - start))
            print(json.dumps(row), flush=True)
            log.write(json.dumps(row) + "\n"); log.flush()
