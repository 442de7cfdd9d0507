#!/usr/bin/env bash
# Session 16, run 6: the split fallback as a direct dispatch of the tiled
# kernel whose workgroups return at once unless the maxima pass flagged an
# infinity or NaN (a guard block), instead of indirect dispatches (which
# wgpu validates with a pass of its own: ~6 us per plan, run 107).
# Prediction: ~3 us per plan (1024: 73 -> ~70 us, af79488 67).
set -u
source scripts/device-env.sh
LIMIT=80 TAIL=5 run "tests" sh -c "$B/test_matmul split 2>&1 | grep -E '^test |panicked|test result'"
for r in 1 2; do
  LIMIT=40 TAIL=5 run "sweep old r$r" $B/matmul_sweep_old --dtype f32 --sizes 1024,2048,4096
  LIMIT=40 TAIL=5 run "sweep new r$r" $B/matmul_sweep --dtype f32 --sizes 1024,2048,4096
done
LIMIT=30 TAIL=2 run "coop old" $B/matmul_kernels_old --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
LIMIT=30 TAIL=2 run "coop new" $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
