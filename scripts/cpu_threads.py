"""Time the demo model's generations on the CPU at several torch thread counts, beside a busy process.

    python scripts/cpu_threads.py --threads 1,2,default --busy 1

Each thread count runs in a fresh process (torch's thread pool is set once per process): the demo
model generates for the first ``--generations`` prompts of its held-out suite, as the default
``kvprune sweep`` does (unpruned, greedy, the tasks' answer length), after one warm-up call. With
``--busy N``, N processes spinning on the CPU (``while True: pass``) run meanwhile, as on a machine
shared with other jobs. Prints one line per thread count: seconds for all generations.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from kvprune.harness.setup.device import THREAD_VARIABLES

CHILD = r"""
import sys, time
import torch
threads = sys.argv[1]
if threads != "default":
    torch.set_num_threads(int(threads))
from kvprune import load_model
from kvprune.harness.demo import DEMO_MODEL_DIR
from kvprune.harness.demo.default import DEMO_TASKS
from kvprune.harness.demo.suite import demo_suite
from kvprune.harness.tasks.task import get_task

loaded = load_model(str(DEMO_MODEL_DIR), device="cpu")
root, count = demo_suite(), int(sys.argv[2])
prompts = []
for name in DEMO_TASKS:
    task = get_task(name)
    for sample in task.load(root):
        waves, prompt = task.render(sample).load(task.channels)
        prompts.append((loaded.build_inputs(waves, prompt), task.max_new_tokens))
prompts = prompts[:count]
pad = loaded.processor.tokenizer.pad_token_id
with torch.no_grad():
    loaded.generating_module.generate(**prompts[0][0], max_new_tokens=prompts[0][1], do_sample=False, pad_token_id=pad)
    start = time.perf_counter()
    for inputs, new_tokens in prompts:
        loaded.generating_module.generate(**inputs, max_new_tokens=new_tokens, do_sample=False, pad_token_id=pad)
print(f"{threads} {torch.get_num_threads()} {time.perf_counter() - start:.2f}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2,default", help="comma list of thread counts, or default (torch's)")
    parser.add_argument("--generations", type=int, default=40)
    parser.add_argument("--busy", type=int, default=1, help="spinning processes running meanwhile")
    args = parser.parse_args()
    environment = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        time.sleep(1)
        print(f"cores {os.cpu_count()}, busy processes {args.busy}, generations {args.generations}")
        print("threads asked, torch threads, seconds")
        for threads in args.threads.split(","):
            done = subprocess.run([sys.executable, "-c", CHILD, threads, str(args.generations)], env=environment,
                                  capture_output=True, text=True, check=True)
            print(done.stdout.strip().splitlines()[-1], flush=True)
    finally:
        for process in busy:
            process.kill()


if __name__ == "__main__":
    main()
