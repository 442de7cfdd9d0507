#!/usr/bin/env bash
# Session 18, run 4 (run 118): two probes.
# 1. Run 115 found f16 4096's 4% pitch cost in A alone (rows of 4096
#    halves; rows of 4128 gave 256-258 TFLOP/s against 248). If it holds at
#    other power-of-two K and wide N, copying A to rows of K + 32 pays where
#    N is large (break-even near N ~ 3500 by copy bandwidth): 4096 x 14336
#    x 4096 (an MLP projection) should gain ~3% net. Kernel alone here, A
#    padded or not, several K.
# 2. The merge kernel with more lanes per column (WGTILE_MERGE=WG,CW; 64
#    splits: 8 per lane at 256,32 in two rounds of 4 loads, 4 at 256,16 in
#    one, 2 at 256,8): predicted -0.5..-1 us per token at every cache length.
set -u
source scripts/device-env.sh
for r in 1 2; do
  for spec in 4096x4096x2048:2080 4096x4096x3072:3104 4096x4096x4096:4128 4096x14336x4096:4128 8192x8192x8192:8224 4096x4096x8192:8224 2048x2048x2048:2080; do
    shape=${spec%%:*}; mult=${spec##*:}
    for w in x a; do
      LIMIT=40 TAIL=1 run "pitch $shape $w r$r" $B/matmul_kernels --dtype f16 --padded-shapes $shape --pad-multiple $mult --pad-operands $w
    done
  done
done
for r in 1 2; do
  for m in 256,32 256,16 256,8 128,8; do
    LIMIT=60 TAIL=3 run "merge $m r$r" env WGTILE_MERGE=$m $B/attention --decode-only --decode-lens 4096,32768,131072
  done
done
