#!/usr/bin/env bash
# Session 13, run 3: where the f32 (split) tensor-core attention forward's
# time goes. WGTILE_COOP_ATTN_PROBE bits (results wrong): 4 softmax, 8
# products, 16 K/V loads and puts, 64 the split arithmetic of the K/V
# staging (hi = f16(x), lo = 0), 128 that of P.
# Question: would K and V split once by a pass before the kernel (each
# K/V value is split again by each of the S / 128 workgroups that stage
# it) pay? It can save at most what bit 64 saves.
set -u
source scripts/device-env.sh
for p in 0 64 128 192 4 8 16 28 0; do
  WGTILE_COOP_ATTN_PROBE=$p LIMIT=60 TAIL=4 run "forward probe $p" sh -c "$B/attention --forward-only --kernels coop --sizes 4096 --dims 128 --no-long | grep -E '^4,16,4096'"
done
