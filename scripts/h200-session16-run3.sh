#!/usr/bin/env bash
# Session 16, run 3: the final build. Probe 32 removed (its dead code made
# the f16 and f32 split kernels ~2% slower in run 2: checked here against
# af79488 with the remaining probe code). The split fallback's cost with
# wgpu's indirect validation off (run 2: 3 us per plan). Tests, the tour.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "tests" sh -c "$B/test_matmul split 2>&1 | grep -E '^test |panicked|test result'; $B/test_pad 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  LIMIT=60 TAIL=6 run "coop old r$r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  LIMIT=60 TAIL=6 run "coop new r$r" $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  LIMIT=90 TAIL=14 run "sweep old r$r" $B/matmul_sweep_old --dtype f32 --sizes 1024,1792,2048,4096 --stages
  LIMIT=90 TAIL=14 run "sweep new r$r" $B/matmul_sweep --dtype f32 --sizes 1024,1792,2048,4096 --stages
done
LIMIT=240 TAIL=60 run "tour" $B/tour
