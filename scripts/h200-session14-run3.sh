#!/usr/bin/env bash
# Session 14, run 3: (1) the f32 pad copies through the word kernel (A and
# B in one dispatch, 16 bytes per invocation, instead of two one-element-
# per-invocation dispatches). Run 87: 1793 padded 39.7-39.8 TFLOP/s, 0.89-
# 0.90x of 1792; predicted +2-5 us of ~290 (to ~0.91x). (2) The f32 split
# test with the last row apart (run 87 stopped at a stale label check).
# (3) Decode probe bit 2 (WGTILE_DECODE_PROBE=4): f16 words widened by
# integer operations instead of unpack2x16float. If the conversions are
# what session 6's probe called the math (74.5 -> 43.2 us without it),
# 32k should drop by several us; if not, nothing moves.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=12 run "tests" sh -c "$B/test_matmul 2>&1 | grep -E '^test .*FAILED|panicked|test result'; $B/test_pad 2>&1 | grep -E 'panicked|test result'; $B/test_padded 2>&1 | grep -E 'panicked|test result'"
for r in 1 2; do
  LIMIT=90 TAIL=8 run "sweep f32 $r" $B/matmul_sweep --dtype f32 --sizes 1792,1793,4096,4097
done
for r in 1 2; do
  for pr in 0 4; do
    LIMIT=60 TAIL=6 run "decode probe $pr r$r" env WGTILE_DECODE_PROBE=$pr $B/attention --decode-only --decode-lens 4096,32768,131072
  done
done
LIMIT=60 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only --decode-lens 4096,32768,131072
