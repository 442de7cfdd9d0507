#!/usr/bin/env bash
# Session 17, run 3 (run 111): the coop matmul with A's runs remapped
# (matmul_coop.wgsl REMAP; WGTILE_COOP_REMAP=0 restores the old order in
# the new build). Run 110's conflict-free order cost registers (selects);
# this one changes only the index formulas. By the bank arithmetic the
# 8-byte stores of A go from 3 to 2 wavefronts per 16 lanes (24 -> 16 per
# subgroup and step, B unchanged at 8). Predicted: f16 4096 +2-5% (248 ->
# 253-260) if the stores sit on the critical path and registers stay at
# 125 (pipeline_stats, old and new).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=6 run "tests" sh -c "$B/test_matmul 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
LIMIT=120 TAIL=12 run "stats new" $B/pipeline_stats --filter coop
LIMIT=120 TAIL=12 run "stats old" $B/pipeline_stats_old --filter coop
for r in 1 2 3; do
  LIMIT=40 TAIL=2 run "coop old r$r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  for rm in 0 1; do
    LIMIT=40 TAIL=2 run "coop remap $rm r$r" env WGTILE_COOP_REMAP=$rm $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  done
done
LIMIT=60 TAIL=6 run "f16 sweep old" $B/matmul_sweep_old --dtype f16 --sizes 1792,1793,4096,4097
LIMIT=60 TAIL=6 run "f16 sweep new" $B/matmul_sweep --dtype f16 --sizes 1792,1793,4096,4097
