#!/usr/bin/env bash
# Session 14, run 2: the split kernel's layout from a time model (whole
# rounds of one workgroup per unit at each layout's measured speed), with
# the last row apart where that saves rounds; padded rows of 4 floats (run
# 86: 4 beat 16 and 32 by 1-3%). Predictions: 1793 padded on 2x4x16x4 at
# ~40 TFLOP/s (0.9x of 1792), 4097 padded on 2x4x32x2 with the last row
# apart at ~65-66 (0.93x of 4096). Also every split layout alone at
# 1024/2048/4096 (2x2x32x4 was never measured: the model needs its speed).
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=12 run "tests" sh -c "$B/test_matmul f32_split 2>&1 | grep -E '^test |panicked|test result'; $B/test_pad 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
LIMIT=90 TAIL=30 run "split kernels alone" $B/matmul_kernels --sizes 1024,2048,4096 --dtype f32 --tiles 128x128x8 --coop 4x4x32 --coop-split 2x4x16x4,2x4x32x2,4x2x16x4,4x2x16x2,2x2x32x4,2x2x32x2 --repeats 10
for r in 1 2; do
  LIMIT=90 TAIL=14 run "sweep f32 $r" $B/matmul_sweep --dtype f32 --sizes 1024,1792,1793,2048,4096,4097
done
