#!/usr/bin/env bash
# Prepared in session 8 (its device time was spent). Nothing here has run on
# the GPU yet.
# 1. the matmul suites with tensor cores on;
# 2. f32 4096/4097 and 1792/1793: the last-row split without copies on the
#    tiled kernel (new default on GPUs where it saves a wave: 4097 on
#    128 x 128 tiles is 1089 workgroups, 8.25 waves, and 1056 without the
#    last row). Predicted f32 4097 from 28.6 (0.87x of 4096) to ~32
#    TFLOP/s (~0.97x): the kernel one round shorter (~4.8 -> ~4.25 ms) plus
#    a GEMV over B with odd N (~30-40 us). 1793 unchanged (no wave saved);
# 3. PyTorch at the same sizes.
set -u
source scripts/device-env.sh
for t in matmul pad padded; do
  LIMIT=120 TAIL=4 run "test_$t" sh -c "$B/test_$t --test-threads=4 2>&1 | grep -E '^test |panicked|test result|error' | grep -v ' ok$' | head -20"
done
for r in 1 2; do
  LIMIT=60 TAIL=10 run "f32_stages r$r" $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f32 --repeats 10 --stages
  LIMIT=60 TAIL=10 run "f16_stages r$r" $B/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10 --stages
done
LIMIT=60 TAIL=10 run torch_matmul python3 scripts/torch_baseline.py --sizes 1792,1793,4096,4097
# 4. every coop layout at 1792 and 1793 (unpadded kernels as they are:
#    1793 on the word-load path), to see what the 1793 kernel costs.
LIMIT=120 TAIL=30 run coop_1793 $B/matmul_kernels --sizes 1792,1793 --dtype f16 --repeats 10 --tiles 128x128x8 --coop 4x4x32x2,2x2x32x4,2x4x32x2,4x2x32x4,2x4x64x2,2x2x64x2
