#!/usr/bin/env bash
# Session 18, run 1 (run 115): the f32 split kernel without edge checks in
# whole-block dimensions by default, odd sizes on the padded K (B copied
# with K' rows, K' a whole number of K steps), against WGTILE_COOP_EDGES=0
# (checks kept, K as it is). Predicted: 1792 / 4096 +5-8% (run 114), 1793
# and 4097 +3-6% (their K checks go, M or N checks stay), ratios about as
# before (0.93x / 0.95x). Also two f16 probes: the f16 kernel's edge checks
# dropped per dimension (WGTILE_COOP_F16_EDGES; run 114 dropped all three:
# -1.5-2%), and which operand's power-of-two row pitch costs f16 4096 its
# 4.5% (run 92: rows of 4128 259.5 against 248 TFLOP/s).
set -u
source scripts/device-env.sh
LIMIT=240 TAIL=8 run "tests" sh -c "$B/test_pad 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'; $B/test_matmul 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  for e in 0 1; do
    LIMIT=60 TAIL=6 run "f32 sweep edges=$e r$r" env WGTILE_COOP_EDGES=$e $B/matmul_sweep --dtype f32 --sizes 1792,1793,4096,4097
  done
done
for r in 1 2; do
  for e in none K MN MNK; do
    LIMIT=40 TAIL=2 run "f16 edges=$e r$r" env WGTILE_COOP_F16_EDGES=$e $B/matmul_kernels --sizes 2048,4096 --dtype f16 --tiles 128x128x8 --coop 4x4x32x2
  done
done
for r in 1 2; do
  for w in x a b ab; do
    LIMIT=40 TAIL=2 run "f16 pitch 4128 on $w r$r" $B/matmul_kernels --dtype f16 --padded-shapes 4096x4096x4096 --pad-multiple 4128 --pad-operands $w
  done
done
LIMIT=60 TAIL=6 run "f16 sweep" $B/matmul_sweep --dtype f16 --sizes 1792,1793,4096,4097
