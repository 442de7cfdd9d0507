#!/usr/bin/env bash
# Session 14, run 5: (1) up to three last rows of C apart as GEMVs where
# that saves a wave. Run 89: M = 4098 at 0.80x (f16) / 0.88x (f32) of 4096
# on a fifth round; predicted ~0.93x for both (two GEMVs of ~13 / ~25 us
# against a round). (2) WGTILE_PAD_FULL_K=1: when A and B are both copied,
# B gets zero rows up to the padded K and the kernel runs K = K' (no
# partial K step). Run 89: the f16 1793 kernel took 71.1 us against 65.5 at
# 1792; session 11 measured an aligned 1824^3 at 179 TFLOP/s (67.8 us).
# If the partial step is the difference, 1793 drops to ~68 us (0.87x).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=12 run "tests" sh -c "$B/test_matmul 2>&1 | grep -E '^test .*FAILED|panicked|test result'; $B/test_pad 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'; WGTILE_PAD_FULL_K=1 $B/test_padded 2>&1 | grep -E 'panicked|test result'; WGTILE_PAD_FULL_K=1 $B/test_matmul f32_split 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  for fk in 0 1; do
    for dt in f16 f32; do
      LIMIT=60 TAIL=12 run "sweep $dt full_k=$fk r$r" env WGTILE_PAD_FULL_K=$fk $B/matmul_sweep --dtype $dt --sizes 1792,1793,4096,4097,4098,4099 --stages
    done
  done
done
