#!/usr/bin/env bash
# Session 13, run 1: the tensor-core matmul's epilogue on subgroup barriers
# (each subgroup's scratch tile ordered by subgroupBarrier, no workgroup
# barrier per tile) and 48-deep K steps (COOP_DEEP_CONFIGS), which fit
# 48 KiB only with the epilogue in rounds.
# A/B in one binary: WGTILE_SUB_BARRIER=0 gives the previous epilogue
# (workgroup barriers; the deep layouts then do not fit and are skipped).
# Predictions: subgroup-barrier epilogue +2-5% at 1792/1793 (one wave, the
# epilogue exposed), +0-2% at 4096. BK 48 at 4096: a linear model of
# session 9's BK 16 -> 32 (159 -> 247 TFLOP/s: per-step overhead T_o =
# 2.5 T_mma) says ~300 if the registers hold (125 of 128 now; 4x4x48x2
# needs 8 more for its prefetch, so it may spill); 2x4x48x4 (256
# invocations, 227 registers at BK 32) has room.
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=12 run "tests" sh -c "$B/test_matmul --test-threads 4 2>&1 | grep -E '^test |panicked|error|test result' | grep -v ' ok$' | head -20; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
LIMIT=90 TAIL=60 run stats sh -c "$B/pipeline_stats --filter MatmulCoop 2>&1 | grep -v 'SPLIT=1' | grep -E 'MatmulCoop|Register|Shared'"
for r in 1 2; do
  LIMIT=120 TAIL=30 run "kernels wg-barrier $r" env WGTILE_SUB_BARRIER=0 $B/matmul_kernels --sizes 1792,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32,2x4x32x4,4x4x48,2x4x48x4,4x2x48x4 --repeats 20
  LIMIT=120 TAIL=30 run "kernels sub-barrier $r" $B/matmul_kernels --sizes 1792,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32,2x4x32x4,4x4x48,2x4x48x4,4x2x48x4 --repeats 20
done
for r in 1 2; do
  LIMIT=120 TAIL=12 run "plans wg-barrier $r" env WGTILE_SUB_BARRIER=0 $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16
  LIMIT=120 TAIL=12 run "plans sub-barrier $r" $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16
done
LIMIT=90 TAIL=20 run torch python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
