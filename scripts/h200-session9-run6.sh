#!/usr/bin/env bash
# Session 9, run 6 (carry .bin with matmul_kernels_old and tour_old from
# baa7310).
# 1. test_matmul (new build);
# 2. A/B, two rounds alternating: the f32 tiled kernel with the operands of
#    k + 1 read before the FMAs of k (register double buffer), the coop
#    kernel with B's fragments first and one A fragment at a time (fewer
#    live fragments; ~125 of 128 registers). Predicted: f32 0-5% (the driver
#    may already hoist the loads), coop 0-5%;
# 3. the pipeline statistics of the new build;
# 4. the tour (old build, the committed code) with PyTorch.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=4 run test_matmul sh -c "$B/test_matmul --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
for r in 1 2; do
  for v in _old ""; do
    LIMIT=60 TAIL=4 run "f32 mk$v r$r" $B/matmul_kernels$v --sizes 4096 --dtype f32 --repeats 10 --tiles 128x128x8 --coop 4x4x32x2
    LIMIT=60 TAIL=4 run "f16 mk$v r$r" $B/matmul_kernels$v --sizes 1792,4096 --dtype f16 --repeats 10 --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4
  done
done
LIMIT=60 TAIL=60 run stats $B/pipeline_stats --filter "BM=128 BN=128 BK=8"
LIMIT=60 TAIL=60 run stats_coop $B/pipeline_stats --filter "WARPS_M=4 WARPS_N=4"
LIMIT=300 TAIL=80 run tour $B/tour_old
LIMIT=60 TAIL=12 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
LIMIT=150 TAIL=40 run torch_attention python3 scripts/torch_attention.py
