#!/usr/bin/env bash
# Session 17, run 2 (run 110): the coop matmul's staging stores without
# bank conflicts (matmul_coop.wgsl STAGE; WGTILE_COOP_STAGE picks 0, 1, 2
# in the new build). By the bank arithmetic the old order makes each 8-byte
# store of A take 3 wavefronts per 16 lanes (B 2) instead of 1: 32 against
# 12 per subgroup and step. Probes (run 104) put stores and conversions at
# ~0.09 of 0.558 ms at 4096. Predicted: f16 4096 246 -> 255-275 TFLOP/s
# with STAGE 2, about half that with STAGE 1; STAGE 0 = the old build.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=30 run "tests" sh -c "$B/test_matmul 2>&1 | grep -E '^test |panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  LIMIT=40 TAIL=3 run "coop old r$r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  for st in 0 1 2; do
    LIMIT=40 TAIL=3 run "coop stage $st r$r" env WGTILE_COOP_STAGE=$st $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  done
done
for r in 1 2; do
  LIMIT=60 TAIL=6 run "f16 sweep old r$r" $B/matmul_sweep_old --dtype f16 --sizes 1792,1793,4096,4097
  LIMIT=60 TAIL=6 run "f16 sweep new r$r" $B/matmul_sweep --dtype f16 --sizes 1792,1793,4096,4097
  LIMIT=60 TAIL=5 run "f32 sweep old r$r" $B/matmul_sweep_old --dtype f32 --sizes 1024,2048,4096
  LIMIT=60 TAIL=5 run "f32 sweep new r$r" $B/matmul_sweep --dtype f32 --sizes 1024,2048,4096
done
