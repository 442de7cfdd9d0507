#!/usr/bin/env bash
# Session 6, last device call: the one-dispatch GEMV with 16 rows per step
# (WGTILE_GEMV_DEEP=1, 16 loads in flight per invocation) against 8, two
# rounds alternating; then the tour as it stands at the end of the session.
set -u
source scripts/device-env.sh
for round in 1 2; do
  for deep in 0 1; do
    WGTILE_GEMV_DEEP=$deep LIMIT=40 TAIL=6 run "gemv_deep${deep}_r$round" $B/matmul_kernels --gemv 4096x4096,4096x14336,14336x4096
  done
done
LIMIT=150 TAIL=200 run tour $B/tour
