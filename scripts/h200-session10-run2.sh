#!/usr/bin/env bash
# Session 10, call 2. (1) The autotune breakdown after compiling the other
# candidates on threads while the first is timed (its warm-up now doubles as
# its measurement's): predicted f32 4096 1176 -> < 1000 ms. (2) Two more
# GEMV workgroup shapes (8 x 32: 128-byte rows per workgroup; 4 x 32: half
# the slices). (3) The backward with the coalesced `prepare` (predicted
# S1024 75 -> ~12 us, S4096 276 -> ~40 us) and every tile pair at S1024 D128.
set -u
source scripts/device-env.sh
export WGTILE_CACHE_DIR=$OUT/tune-cache
for shape in "4096 f32" "4096 f16" "3000 f16" "2048 f16"; do
  set -- $shape
  for p in first second; do
    LIMIT=60 TAIL=12 run "autotune $1 $2 $p" env WGTILE_AUTOTUNE=fast RUST_LOG=wgtile=debug $B/matmul_sweep --sizes $1 --dtype $2 --no-pad --repeats 5
  done
done
for r in 1 2; do
  for shape in 4x64 8x32 4x32; do
    LIMIT=60 TAIL=3 run "gemv $shape r$r" env WGTILE_GEMV_WIDE_SHAPE=$shape $B/matmul_kernels --gemv 4096x4096 --repeats 20
  done
done
LIMIT=150 TAIL=8 run "backward stages" $B/attention --sizes 1024,4096 --dims 128 --repeats 5 --no-long
LIMIT=150 TAIL=8 run "backward sweep" $B/attention --sizes 1024 --dims 128 --repeats 5 --no-long --sweep-backward
