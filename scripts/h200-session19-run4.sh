#!/usr/bin/env bash
# Session 19, run 4 (run 123): the one-dispatch GEMV (vecmat_wide) with its
# 16-row steps software-pipelined (the next step's 16 loads issued before
# this step's arithmetic). At 4096 x 4096 an invocation has only 4 such
# steps, and each ended with every warp of the SM waiting on its slowest
# load. Predicted: f16 4096^2 2616 -> ~2900-3200 GB/s (70-76% of the large
# copy, the target), f32 +5-10%; K-split shapes unchanged.
set -u
source scripts/device-env.sh
LIMIT=60 TAIL=12 run "registers" sh -c "$B/pipeline_stats --all --filter Gemv 2>&1 | grep -E 'Gemv|Register|Local'"
LIMIT=120 TAIL=6 run "test_matmul gemv" sh -c "$B/test_matmul matrix_vector 2>&1 | grep -E '^test |panicked|test result'"
for r in 1 2 3; do
  LIMIT=60 TAIL=9 run "gemv old r$r" $B/matmul_kernels_old --gemv 4096x4096,14336x4096,4096x14336
  LIMIT=60 TAIL=9 run "gemv new r$r" $B/matmul_kernels --gemv 4096x4096,14336x4096,4096x14336
done
LIMIT=90 TAIL=12 run "torch" python3 scripts/torch_baseline.py --sizes 1024
