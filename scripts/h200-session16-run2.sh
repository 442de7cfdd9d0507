#!/usr/bin/env bash
# Session 16, run 2.
# (1) The split plan's fallback with wgpu's indirect-argument validation
#     off (run 1: the fallback's empty indirect dispatch cost 6 us per plan
#     with it, 67 -> 73 us at 1024). Prediction: 1-2 us. The previous
#     build (af79488, no fallback) alongside, two rounds.
# (2) Probe 32: the staging without the f16 conversions (unpack2x16float
#     then f16()), the loads kept. If the conversions are what the staging
#     costs (run 1: 29% of the 4096 kernel), this gets most of probe 8's
#     gain (246 -> 347 TFLOP/s).
# (3) Every coop layout at 4096 and 2048 (2 workgroups per SM overlap one's
#     staging with the other's products; session 2's survey predates the
#     register prefetch).
set -u
source scripts/device-env.sh
for r in 1 2; do
  LIMIT=60 TAIL=10 run "sweep old r$r" $B/matmul_sweep_old --dtype f32 --sizes 1024,1792,2048 --stages
  LIMIT=60 TAIL=10 run "sweep new r$r" $B/matmul_sweep --dtype f32 --sizes 1024,1792,2048 --stages
done
for p in 0 32 36 40; do
  LIMIT=40 TAIL=2 run "probe $p" env WGTILE_COOP_PROBE=$p $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
done
LIMIT=90 TAIL=14 run "layouts" $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,2x4x32x2,4x2x32x2,2x2x32x2,2x2x32x4,2x4x32x4,4x2x32x4,1x2x32x2
LIMIT=40 TAIL=3 run "tests" sh -c "$B/test_matmul split 2>&1 | grep -E 'panicked|test result'"
