#!/usr/bin/env bash
# Session 18, run 3 (run 117): the final build (the f32 split kernel without
# edge checks in whole-block dimensions, odd sizes on a padded K; the
# lane-parallel decode kernel reverted): every GPU test binary, the f32
# figure again, and the tour.
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=8 run "tests" sh -c "for t in matmul padded pad attention; do $B/test_\$t 2>&1 | grep -E 'panicked|test result'; done"
LIMIT=150 TAIL=6 run "figure f32" $B/matmul_sweep --dtype f32 --csv $OUT/matmul_sweep_h200_f32.csv --svg $OUT/matmul_sweep_h200_f32.svg
LIMIT=300 TAIL=60 run "tour" $B/tour
