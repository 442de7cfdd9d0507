#!/usr/bin/env bash
# Session 16, run 5: the final build (wgpu's indirect validation back on,
# as in run 1): the split tests on the H200, f16 coop and the f32 plans
# against af79488, two rounds.
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=6 run "tests" sh -c "$B/test_matmul split 2>&1 | grep -E '^test |panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  LIMIT=40 TAIL=2 run "coop old r$r" $B/matmul_kernels_old --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  LIMIT=40 TAIL=2 run "coop new r$r" $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  LIMIT=60 TAIL=6 run "sweep old r$r" $B/matmul_sweep_old --dtype f32 --sizes 1024,2048,4096
  LIMIT=60 TAIL=6 run "sweep new r$r" $B/matmul_sweep --dtype f32 --sizes 1024,2048,4096
done
