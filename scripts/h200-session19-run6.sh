#!/usr/bin/env bash
# Session 19, run 6 (run 125): the one-dispatch GEMV's workgroup shape at
# 4096 x 4096 in both dtypes (WGTILE_GEMV_WIDE_SHAPE=LxS: L 16-byte words
# of columns, S row slices). Session 10 swept narrower shapes for f16 only.
# f32 needs +3% for 70% of the large copy (run 124).
set -u
source scripts/device-env.sh
for r in 1 2; do
  for s in 4x64 2x64 2x128 4x32 8x32 1x256 8x16 4x16 1x128; do
    LIMIT=30 TAIL=2 run "wide $s r$r" env WGTILE_GEMV_WIDE_SHAPE=$s $B/matmul_kernels --gemv 4096x4096
  done
done
