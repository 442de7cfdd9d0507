#!/usr/bin/env bash
# Session 6, sixth device call: the one-dispatch GEMV at 4 x 64 (default)
# against 2 x 128 (twice the workgroups), two rounds alternating; then the
# tour (its padding lines now split the padded plans' time per kernel).
set -u
source scripts/device-env.sh
for round in 1 2; do
  for sh in 4x64 2x128; do
    WGTILE_GEMV_WIDE_SHAPE=$sh LIMIT=60 TAIL=6 run "gemv_${sh}_r$round" $B/matmul_kernels --gemv 4096x4096,4096x14336,14336x4096
  done
done
LIMIT=150 TAIL=60 run tour $B/tour
