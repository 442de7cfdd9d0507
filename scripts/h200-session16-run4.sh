#!/usr/bin/env bash
# Session 16, run 4: runs 2-3 found the f16 coop kernel ~2% slower than
# af79488's (241 / 239.5 against 244.7 / 244.5 TFLOP/s at 4096), run 1 not
# (the same probe code). What differs from run 1's build: wgpu's
# indirect-argument validation turned off at instance creation. A/B with
# it back on through the environment (WGPU_VALIDATION_INDIRECT_CALL=1),
# three rounds, alternating.
set -u
source scripts/device-env.sh
for r in 1 2 3; do
  LIMIT=40 TAIL=2 run "coop old r$r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  LIMIT=40 TAIL=2 run "coop new r$r" $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  LIMIT=40 TAIL=2 run "coop new validation r$r" env WGPU_VALIDATION_INDIRECT_CALL=1 $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
done
for r in 1 2; do
  LIMIT=60 TAIL=5 run "sweep new r$r" $B/matmul_sweep --dtype f32 --sizes 1024,2048,4096
  LIMIT=60 TAIL=5 run "sweep new validation r$r" env WGPU_VALIDATION_INDIRECT_CALL=1 $B/matmul_sweep --dtype f32 --sizes 1024,2048,4096
done
