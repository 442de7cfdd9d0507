#!/usr/bin/env bash
# Session 18, run 5 (run 119): f32 atomic-add throughput in the pattern a
# FlashAttention-2 backward would add dQ with (examples/atomics_probe.rs),
# at B4 H16 S4096 D128 with key blocks of 128 (our dK/dV kernel's W8) and
# 64, against plain stores of the same addresses. The dQ pass it would
# replace takes ~4.2 ms (run 100); the design needs the adds well under it.
set -u
source scripts/device-env.sh
for kb in 128 64; do
  LIMIT=60 TAIL=5 run "atomics kb=$kb" $B/atomics_probe --heads 64 --seq 4096 --dim 128 --key-block $kb
done
