#!/usr/bin/env bash
# Session 19, run 1 (run 120): the ping-pong tensor-core matmul (GROUPS 2:
# two groups of subgroups per workgroup, one group's products beside the
# other's staging, one barrier per phase). Predicted: 4096 f16 from ~247
# towards 300-400 TFLOP/s if the phases overlap (run 107's probes: products
# 0.26 ms, staging 0.16 and barriers 0.10 of 0.558, not overlapped).
# Registers first (a ping-pong layout past 128 at 512 invocations spills),
# then the tests on the H200 (every ping-pong layout that fits, odd shapes,
# transposed), then the layouts side by side with the old build's default.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=80 run "registers" sh -c "$B/pipeline_stats --filter MatmulCoop 2>&1 | grep -E 'MatmulCoop|registers|spill|local|shared' | head -80"
LIMIT=240 TAIL=12 run "test_matmul" sh -c "$B/test_matmul 2>&1 | grep -E '^test |panicked|test result|assert'"
PP=4x4x32x2,2x4x32x2p,2x2x32x4p,2x4x16x2p,2x2x32x2p,1x4x32x2p
for r in 1 2; do
  LIMIT=120 TAIL=30 run "layouts r$r" $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop $PP
  LIMIT=40 TAIL=4 run "coop old r$r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
done
LIMIT=120 TAIL=20 run "big" $B/matmul_kernels --sizes 1792,8192 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,2x4x32x2p,2x2x32x4p --repeats 5
LIMIT=120 TAIL=12 run "torch" python3 scripts/torch_baseline.py --sizes 1792,4096
