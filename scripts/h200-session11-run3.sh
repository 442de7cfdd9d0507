#!/usr/bin/env bash
# Session 11, run 3: the vectorised softmax (forward) and P/dS (backward)
# of the tensor-core attention kernels, against the previous build
# (attention_old) in the same call, two rounds; the forward's timing
# probes again; the attention tests on tensor cores first.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=8 run "test_attention" sh -c "$B/test_attention --test-threads 4 2>&1 | grep -E '^test |panicked|element|test result' | grep -v ' ok$' | head -20"
for r in 1 2; do
  LIMIT=90 TAIL=5 run "sweep old $r" $B/attention_old --sweep-coop --sweep-only --sizes 1024,4096 --dims 128,64
  LIMIT=90 TAIL=5 run "sweep new $r" $B/attention --sweep-coop --sweep-only --sizes 1024,4096 --dims 128,64
  LIMIT=90 TAIL=10 run "backward old $r" $B/attention_old --backward-only --sizes 1024,4096 --dims 128,64
  LIMIT=90 TAIL=10 run "backward new $r" $B/attention --backward-only --sizes 1024,4096 --dims 128,64
done
for p in 4 28 60; do
  WGTILE_COOP_ATTN_PROBE=$p LIMIT=60 TAIL=2 run "forward probe $p" sh -c "$B/attention --forward-only --kernels coop --sizes 4096 --dims 128 --no-long | grep -E '^4,16,4096'"
done
LIMIT=60 TAIL=3 run "decode" sh -c "$B/attention --decode-only --decode-lens 32768 | grep -E 'f16 '"
