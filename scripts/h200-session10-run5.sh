#!/usr/bin/env bash
# Session 10, call 5: the row statistics staged on the masked/edge blocks
# too (p_ds_with) against attention_old (interior blocks only), A/B, two
# rounds: predicted causal +3-8%, full unchanged. Then every tile pair again
# (the statistics change moved the balance): S1024 and S4096, D128 and D64.
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=3 run "test_attention" $B/test_attention --test-threads 4 coop
for r in 1 2; do
  for bin in attention attention_old; do
    LIMIT=90 TAIL=6 run "backward $bin r$r" $B/$bin --sizes 1024,4096 --dims 128 --repeats 5 --backward-only
  done
done
LIMIT=200 TAIL=4 run "backward sweep" $B/attention --sizes 1024,4096 --dims 128,64 --repeats 5 --sweep-backward
