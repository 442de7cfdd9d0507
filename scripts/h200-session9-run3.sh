#!/usr/bin/env bash
# Session 9, run 3: the coop kernel with two workgroup-memory buffers per
# operand (WGTILE_COOP_STAGES=2: the K loop written out for both buffers, so
# every buffer address is a constant offset; one barrier per step; the
# epilogue scratch halved so 4 x 4 subgroups fit 48 KiB with BK 16).
# Layouts that do not fit two buffers run single-buffered (4x4x32x2).
# Predicted: 4x4x16x2 two-stage >= 4x4x32x2 single (247 TFLOP/s at 4096)
# if session 7's loss came from its loop-carried buffer index; max|err|
# must stay ~1.6e-2 (1792) / 3.2e-2 (4096).
set -u
source scripts/device-env.sh
L=4x4x32x2,4x4x16x2,2x2x32x4,4x2x16x4,2x4x32x2,2x4x16x4
for r in 1 2; do
  for st in 1 2; do
    LIMIT=120 TAIL=14 run "coop stages$st r$r" env WGTILE_COOP_STAGES=$st $B/matmul_kernels --sizes 1792,4096 --dtype f16 --repeats 10 --tiles 128x128x8 --coop $L
  done
done
