#!/usr/bin/env bash
# Session 17, run 4 (run 112): A's runs in an order that keeps each quarter
# of a subgroup on two whole 64-byte row segments (as before: run 111's
# order, 8 rows per quarter, ran at 0.70x) while the 8-byte stores of 16
# lanes take each bank pair twice instead of up to 3 times (REMAP 1;
# WGTILE_COOP_REMAP=0 is the old order). Predicted: f16 4096 +2-5% if the
# stores sit on the critical path, 0 otherwise; registers unchanged (125).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=6 run "tests" sh -c "$B/test_matmul 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
LIMIT=120 TAIL=30 run "stats remap 1" $B/pipeline_stats --filter MatmulCoop
LIMIT=120 TAIL=30 run "stats remap 0" $B/pipeline_stats --filter MatmulCoop --set REMAP=0
for r in 1 2 3; do
  LIMIT=40 TAIL=2 run "coop old r$r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  for rm in 0 1; do
    LIMIT=40 TAIL=2 run "coop remap $rm r$r" env WGTILE_COOP_REMAP=$rm $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  done
done
LIMIT=60 TAIL=6 run "f16 sweep old" $B/matmul_sweep_old --dtype f16 --sizes 1792,1793,4096,4097
LIMIT=60 TAIL=6 run "f16 sweep new" $B/matmul_sweep --dtype f16 --sizes 1792,1793,4096,4097
