#!/usr/bin/env bash
# Session 17, run 1 (run 109).
# 1. The f32 tensor-core attention's non-finite fallback on the H200
#    (tests), and its cost: the guarded f32 flash kernel's workgroups
#    return at once for finite inputs. Predicted: a few us per plan, under
#    1% at S1024 D128 B4 H16 (~0.5 ms), nothing at S4096.
# 2. The decode kernel's L2 touch prefetch (WGTILE_DECODE_TOUCH = blocks
#    ahead): predicted, if the key loop waits on DRAM latency with one
#    block of register prefetch, f16 32k 68 -> 55-62 us and 128k 184 ->
#    150-170; no change if it is bound elsewhere.
set -u
source scripts/device-env.sh
LIMIT=150 TAIL=8 run "tests" sh -c "$B/test_attention coop_f32 2>&1 | grep -E '^test |panicked|test result'"
for r in 1 2; do
  LIMIT=60 TAIL=4 run "decode old r$r" $B/attention_old --decode-only --decode-lens 4096,32768,131072
  for t in 0 2 3; do
    LIMIT=60 TAIL=4 run "decode touch $t r$r" env WGTILE_DECODE_TOUCH=$t $B/attention --decode-only --decode-lens 4096,32768,131072
  done
done
for r in 1 2; do
  LIMIT=90 TAIL=6 run "f32 coop old r$r" $B/attention_old --forward-only --kernels coop --sizes 1024,4096 --dims 128 --no-long
  LIMIT=90 TAIL=6 run "f32 coop new r$r" $B/attention --forward-only --kernels coop --sizes 1024,4096 --dims 128 --no-long
done
LIMIT=90 TAIL=8 run torch_decode python3 scripts/torch_attention.py --decode-only --decode-lens 4096,32768,131072
