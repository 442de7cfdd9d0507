#!/usr/bin/env bash
# Session 16, run 1.
# (1) The f32 split plan's fallback for infinities and NaN: the maxima pass
#     arms indirect dispatches of the f32 CUDA-core kernel. Tests on the
#     H200 (the split kernel runs only on tensor cores), and its cost with
#     finite inputs: one more (empty) indirect dispatch, plus wgpu's
#     validation of the indirect arguments. Prediction: 2-5 us per plan,
#     +1-3% at 1024 (~70 us), under 1% from 1792 on. The previous build
#     (matmul_sweep_old, af79488) alongside, two rounds.
# (2) f16 coop timing probes (WGTILE_COOP_PROBE bits: 1 half the products,
#     2 fragments loaded once, 4 global loads of the first step only,
#     8 no staging after the first step, 16 no barriers) at 4096, and the
#     default with the probe code compiled out against the old build.
# (3) Decode after session 15's review (CE 1 branch and merge knob gone):
#     f16 32k should stay ~68 us.
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=14 run "tests" sh -c "$B/test_matmul split 2>&1 | grep -E '^test |panicked|test result'; $B/test_pad 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  LIMIT=90 TAIL=14 run "sweep old r$r" $B/matmul_sweep_old --dtype f32 --sizes 1024,1792,1793,2048,4096 --stages
  LIMIT=90 TAIL=14 run "sweep new r$r" $B/matmul_sweep --dtype f32 --sizes 1024,1792,1793,2048,4096 --stages
done
for r in 1 2; do
  LIMIT=60 TAIL=6 run "coop old r$r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  LIMIT=60 TAIL=6 run "coop new r$r" $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
done
for p in 1 2 4 8 16 24 26 27; do
  LIMIT=40 TAIL=3 run "probe $p" env WGTILE_COOP_PROBE=$p $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
done
LIMIT=90 TAIL=12 run "decode" $B/attention --decode-only --decode-lens 4096,32768,131072
