#!/usr/bin/env bash
# Prepared in session 9 (not run). Session 9's two tours measured the f32
# GEMV 4096^2 at 937-977 GB/s (0.069-0.072 ms) while matmul_kernels --gemv
# in the same call measured 2805 (0.0239 ms), as did session 8's tour. The
# tour's only new work before it: the f32 4097 plan with its last row as a
# GEMV (section 4). Does timing that plan first slow the GEMV down?
# Control: 4096 first (no split), then nothing first.
set -u
source scripts/device-env.sh
for before in 4097 4096 ""; do
  LIMIT=60 TAIL=8 run "gemv after '$before'" $B/matmul_kernels --gemv 4096x4096,4096x14336 --repeats 20 ${before:+--before $before}
done
# The one-dispatch GEMV's workgroup shape (WGTILE_GEMV_WIDE_SHAPE, new in
# session 9, unmeasured): f16 4096 x 4096 runs 128 workgroups of 4 x 64 on
# 132 SMs (one each, four idle). Predicted: 2x128 (256 workgroups, 16 columns
# = one 32-byte sector per row each) f16 2590 -> ~2900 GB/s; f32 (256 -> 512
# workgroups) +0-5%.
for r in 1 2; do
  for shape in 4x64 2x64 2x128 1x256; do
    LIMIT=60 TAIL=6 run "gemv $shape r$r" env WGTILE_GEMV_WIDE_SHAPE=$shape $B/matmul_kernels --gemv 4096x4096,4096x14336 --repeats 20
  done
done
# The autotune target (< 1 s per new shape bucket; a second process does no
# tuning): last measured in run 10 (f32 4096 1041 ms), kernels changed since.
export WGTILE_CACHE_DIR=$OUT/tune-cache
for shape in "4096 f32" "4096 f16" "3000 f16"; do
  set -- $shape
  for p in first second; do
    LIMIT=60 TAIL=6 run "autotune $1 $2 $p" env WGTILE_AUTOTUNE=fast RUST_LOG=wgtile=info $B/matmul_sweep --sizes $1 --dtype $2 --no-pad --repeats 5
  done
done
# What the driver's "Local Memory Size" (2^36 for every kernel in session 9)
# means: pipeline_stats now prints each statistic's format and description.
LIMIT=60 TAIL=20 run stats $B/pipeline_stats --filter "WARPS_M=4 WARPS_N=4"
# Where the tensor-core backward's time goes (session 10): each kernel of the
# plan (prepare, dK/dV, dQ) timed alone, f16 D128 S1024 and S4096.
LIMIT=150 TAIL=30 run "backward stages" $B/attention --sizes 1024,4096 --dims 128 --repeats 5 --no-long
LIMIT=60 TAIL=12 run "torch attention" python3 scripts/torch_attention.py --no-long
