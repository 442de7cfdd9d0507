#!/usr/bin/env bash
# Session 3, last device run (NVIDIA H200): the fixes after run 4 (coop
# transposes and the coop attention kernel with row-major loads only), their
# speed, the decode default, the throughput-vs-N figures and the tour.
# Build: scripts/build-device.sh; carry .bin and .gl. Log: $OUT/all.log,
# figures: $OUT/sweep_h200_{f16,f32}.{csv,svg}.
set -u
source scripts/device-env.sh
LIMIT=40 TAIL=8 run test_matmul $B/test_matmul --test-threads=1
LIMIT=60 TAIL=14 run test_attention_coop $B/test_attention --test-threads=1 coop backward_matches
LIMIT=60 TAIL=12 run sweep_coop $B/attention --sweep-coop --sweep-only
for t in b ab; do
  LIMIT=30 TAIL=5 run "transpose $t" sh -c "$B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4 --transpose $t 2>&1 | grep -E 'coop|tiled|error'"
done
LIMIT=40 TAIL=16 run decode $B/attention --decode-only
for dt in f16 f32; do
  LIMIT=70 TAIL=10 run "figure $dt" $B/matmul_sweep --dtype $dt --min 256 --max 4352 --step 128 \
    --csv "$OUT/sweep_h200_$dt.csv" --svg "$OUT/sweep_h200_$dt.svg"
done
LIMIT=120 TAIL=60 run tour $B/tour
