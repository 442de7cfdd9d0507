#!/usr/bin/env bash
# Session 11, run 2: where the tensor-core attention kernels' time goes.
# Run 1 found the one-subgroup decode kernel at ~11 us per 16-key block
# whether K/V are staged or loaded by cooperative loads: timing probes
# (WGTILE_DECODE_COOP_PROBE bits: 1 softmax, 2 products, 4 loads, 8
# rescale check skipped) at 32k, and the same for the forward kernel
# (WGTILE_COOP_ATTN_PROBE: 4 softmax, 8 products, 16 loads, 32 rescale
# check) at B4 H16 S4096 D128 f16. Then the forward tile sweep, this build
# against the previous one (the probe branches must cost nothing at 0).
set -u
source scripts/device-env.sh
for p in 0 1 2 4 8 6 5 3; do
  WGTILE_DECODE_COOP_PROBE=$p LIMIT=60 TAIL=2 run "decode probe $p" sh -c "$B/attention --decode-only --decode-lens 32768 | grep -E 'f16 .*decode-tc'"
done
for p in 0 4 8 16 32 12 20 24 28 60; do
  WGTILE_COOP_ATTN_PROBE=$p LIMIT=60 TAIL=2 run "forward probe $p" sh -c "$B/attention --forward-only --kernels coop --sizes 4096 --dims 128 --no-long | grep -E '^4,16,4096'"
done
for r in 1 2; do
  LIMIT=90 TAIL=3 run "sweep old $r" $B/attention_old --sweep-coop --sweep-only --sizes 4096 --dims 128
  LIMIT=90 TAIL=3 run "sweep new $r" $B/attention --sweep-coop --sweep-only --sizes 4096 --dims 128
done
