#!/usr/bin/env bash
# Session 14, run 6: the split kernel's max pass reads rows that start on
# 16 bytes as 16-byte words (run 90: 19.8 us at 1792, 68.6 us at 4096, i.e.
# 1.3-2.0 TB/s; predicted ~10 and ~45 us, +3-4% at 1792 and +1% at 4096
# for whole f32 plans); the figures again with up to three rows apart
# (4098 and 4099 were on a fifth round in run 89); the GPU test suites.
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=8 run "tests" sh -c "$B/test_matmul 2>&1 | grep -E '^test .*FAILED|panicked|test result'; $B/test_pad 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
LIMIT=60 TAIL=14 run "f32 stages" $B/matmul_sweep --dtype f32 --sizes 1024,1792,1793,2048,4096,4097 --stages
for dt in f32 f16; do
  LIMIT=120 TAIL=6 run "figure $dt" $B/matmul_sweep --dtype $dt --csv $OUT/matmul_sweep_h200_$dt.csv --svg $OUT/matmul_sweep_h200_$dt.svg
done
