#!/usr/bin/env bash
# The lecture's figure on this GPU: square matmul throughput against N, f32
# and f16, raw shapes and through the padding layer (autotune off, so the
# figure shows the dispatcher's rules). Writes $OUT/matmul_sweep_<dtype>.csv
# and .svg; docs/matmul_sweep_h200_*.{csv,svg} came from this sweep
# (runs 89, 91 and 117 of docs/perf/log-2026-11.md). `matmul_sweep --replot
# CSV --svg SVG` redraws a figure from its CSV.
#
#   SWEEP_STEP=128 bash bench/matmul-figures.sh    # N = 256, 256 + step, .. 4352
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/env.sh || exit 1
for dt in f32 f16; do
  LIMIT=600 TAIL=14 run "sweep $dt" "$B/matmul_sweep" --dtype "$dt" --min 256 --max 4352 --step "${SWEEP_STEP:-128}" \
    --csv "$OUT/matmul_sweep_$dt.csv" --svg "$OUT/matmul_sweep_$dt.svg"
done
if have_torch; then
  LIMIT=120 TAIL=16 run "torch matmul" python3 bench/torch_matmul.py
else
  skip "torch matmul" "no PyTorch with a GPU here"
fi
summary
