#!/usr/bin/env bash
# Session 15, run 1. (1) f16 coop at BK 48: the epilogue scratch now runs
# in rounds where the whole scratch would not fit, so 256x128 blocks take
# BK 48 within 48 KiB (4x4x48x2: 44.75 KiB; 16 subgroups, the tiles 40.75
# KiB). Prediction: 3 k slices per barrier pair instead of 2 hide more of
# the global loads' latency: +5-15% at 4096 if the 8 more prefetch
# registers (125 of 128 now) do not spill; if they do, a loss. The
# previous build (matmul_kernels_old, ae2d40d) on 4x4x32x2 alongside: the
# restructured K loop and epilogue must not cost the default anything.
# (2) K steps rotated per block row (WGTILE_COOP_ROTATE=1): does the 4.5%
# the power-of-two row pitch costs (run 92: rows of 4096 / 4128 halves
# 248 / 259.5) come from concurrent blocks reading the same columns?
# (3) decode over cache lengths 2k-128k: where the split pass's time
# goes (a fixed part against a per-key part).
set -u
source scripts/device-env.sh
for r in 1 2; do
  LIMIT=60 TAIL=12 run "coop old r$r" $B/matmul_kernels_old --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  LIMIT=90 TAIL=16 run "coop new r$r" $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,4x4x48x2,4x2x48x4,2x4x48x4,2x2x48x4,2x2x32x4
  LIMIT=60 TAIL=8 run "coop rotate r$r" env WGTILE_COOP_ROTATE=1 $B/matmul_kernels --sizes 4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2,4x4x48x2
done
LIMIT=60 TAIL=4 run "f16 pitch" sh -c "$B/matmul_kernels --dtype f16 --padded-shapes 4096x4096x4096 --pad-multiple 4096 | tail -1; $B/matmul_kernels --dtype f16 --padded-shapes 4096x4096x4096 --pad-multiple 4128 | tail -1"
LIMIT=120 TAIL=20 run "decode lengths" $B/attention --decode-only --decode-lens 2048,4096,8192,16384,32768,65536,131072
