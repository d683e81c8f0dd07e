#!/usr/bin/env bash
# kvprune bench on one GPU in one call of at most 9 minutes, model builds included.
#
#   OUT=/some/folder bash scripts/gpu_bench.sh        (repository root, kvprune installed)
#
# 1. Qwen2.5-Omni-7B shape at 5 min, 2 min and 30 s of audio: unpruned, ideal, and all four presses
#    at ratios 0, 0.5 and 0.9, with the default 2 warm-up runs, 5 timed runs and 32 decode tokens.
#    Estimate (FACTS §5 anchors, H200): ~4.5 min of runs + ~0.5 min start-up and build; H100 a bit more.
# 2. Qwen2.5-Omni-3B shape, same grid with lighter settings (1 warm-up, 3 runs, 16 decode tokens,
#    ~2 min), in the time left. Both passes stop starting runs at their deadline (--max-minutes);
#    what did not run is recorded as skipped, and every file is still written.
#
# Writes 8 files: $OUT/env.txt, $OUT/log.txt, $OUT/omni7b/{bench.csv,bench.md,prefill_vs_ratio.png}
# and $OUT/omni3b/{the same three}.
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

python3 -m kvprune.harness.bench --preset qwen2.5-omni-7b "${GRID[@]}" \
  --max-minutes "$(python3 -c "print(min(6.3, $(minutes_left)))")" --out "$OUT/omni7b" 2>&1 | tee "$OUT/log.txt"
echo "omni-7b pass: exit ${PIPESTATUS[0]}, ${SECONDS}s elapsed" | tee -a "$OUT/log.txt"

if python3 -c "import sys; sys.exit(0 if $(minutes_left) >= 1.5 else 1)"; then
  python3 -m kvprune.harness.bench --preset qwen2.5-omni-3b "${GRID[@]}" --warmup 1 --repeats 3 --decode-tokens 16 \
    --max-minutes "$(minutes_left)" --out "$OUT/omni3b" 2>&1 | tee -a "$OUT/log.txt"
  echo "omni-3b pass: exit ${PIPESTATUS[0]}, ${SECONDS}s elapsed" | tee -a "$OUT/log.txt"
else
  echo "omni-3b pass skipped: less than 1.5 min left" | tee -a "$OUT/log.txt"
fi

cat "$OUT/omni7b/bench.md"
