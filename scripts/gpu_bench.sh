#!/usr/bin/env bash
# kvprune on one GPU in one call of at most 9 minutes (model builds included); results under $OUT.
#
#   OUT=/some/folder bash scripts/gpu_bench.sh        (kvprune importable: installed, or on PYTHONPATH)
#
# 1. kvprune bench, Qwen2.5-Omni-7B shape at 5 min, 2 min and 30 s of audio: unpruned, ideal, and all
#    four presses at ratios 0, 0.5 and 0.9 (requests interleaved in rounds: 2 warm-up, 5 timed).
# 2. kvprune sweep of the demo model on the GPU: the harness's CUDA-event timing of real generate
#    calls (prefill = time to first token, decode = the rest of the same call).
# 3. kvprune bench, Qwen2.5-Omni-3B shape, lighter settings, in the time left (its bench.md only).
# Each bench pass stops starting runs at its deadline (--max-minutes); what did not run is recorded.
#
# Writes at most 8 files: env.txt, log.txt, omni7b/{bench.csv,bench.md,prefill_vs_ratio.png},
# demo/{summary.csv,report.md} and omni3b.md.
set -uo pipefail

OUT=${OUT:?set OUT to the folder for the results}
BUDGET_S=${BUDGET_S:-500}  # start no run after this many seconds from now; a run takes at most ~10 s
# longest audio first: if a pass runs out of time, what is skipped is the short audio, not the 5 min targets
GRID=(--audio-seconds 300,120,30 --methods fastv,random,frame,dart --ratios 0,0.5,0.9)
mkdir -p "$OUT"

{
  nvidia-smi --query-gpu=name --format=csv
  nvidia-smi --query-gpu=memory.total,driver_version --format=csv
  python3 -c "import sys, torch, transformers, kvprune; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda); print('transformers', transformers.__version__); print('kvprune', kvprune.__version__)"
} 2>&1 | tee "$OUT/env.txt"

minutes_left() { python3 -c "print(round(max(0.0, ($BUDGET_S - $SECONDS) / 60), 2))"; }

python3 -m kvprune.harness.cli bench --preset qwen2.5-omni-7b "${GRID[@]}" --quiet \
  --max-minutes "$(python3 -c "print(min(6.0, $(minutes_left)))")" --out "$OUT/omni7b" 2>&1 | tee "$OUT/log.txt"
echo "omni-7b pass: exit ${PIPESTATUS[0]}, ${SECONDS}s elapsed" | tee -a "$OUT/log.txt"

python3 -m kvprune.harness.cli sweep --model demo --tasks demo_count,demo_pitch --methods fastv,frame --ratios 0.5,0.9 \
  --limit 5 --out "$OUT/demo_run" --quiet --no-plots 2>&1 | tee -a "$OUT/log.txt"
mkdir -p "$OUT/demo" && mv "$OUT/demo_run/summary.csv" "$OUT/demo_run/report.md" "$OUT/demo/" && rm -r "$OUT/demo_run"
echo "demo sweep: ${SECONDS}s elapsed" | tee -a "$OUT/log.txt"

if python3 -c "import sys; sys.exit(0 if $(minutes_left) >= 1.5 else 1)"; then
  python3 -m kvprune.harness.cli bench --preset qwen2.5-omni-3b "${GRID[@]}" --warmup 1 --repeats 3 --decode-tokens 16 \
    --quiet --max-minutes "$(minutes_left)" --out /tmp/omni3b 2>&1 | tee -a "$OUT/log.txt"
  cp /tmp/omni3b/bench.md "$OUT/omni3b.md"
  echo "omni-3b pass: ${SECONDS}s elapsed" | tee -a "$OUT/log.txt"
else
  echo "omni-3b pass skipped: less than 1.5 min left" | tee -a "$OUT/log.txt"
fi

cat "$OUT/omni7b/bench.md"
