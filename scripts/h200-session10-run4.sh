#!/usr/bin/env bash
# Session 10, call 4: the backward's row statistics off the inner loop (dQ:
# its row's lse2 and Delta in registers; dK/dV: the block's staged in
# workgroup memory with Q and dO) against the previous build
# (attention_old: subgroup barriers, statistics read per element), A/B
# alternating, two rounds. Predicted +1-3% (S1024 D128 71.3 -> ~72.5).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=3 run "test_attention" $B/test_attention --test-threads 4 coop
for r in 1 2; do
  for bin in attention attention_old; do
    LIMIT=90 TAIL=6 run "backward $bin r$r" $B/$bin --sizes 1024,4096 --dims 128,64 --repeats 5 --backward-only
  done
done
LIMIT=60 TAIL=40 run "stats" $B/pipeline_stats --attention --filter "AttentionBwdCoop"
