#!/usr/bin/env bash
# Session 10, call 3: subgroup barriers in the tensor-core backward (the
# two barriers per block that guard only a subgroup's own scratch rows).
# Correctness first (the attention tests on tensor cores), then A/B with
# WGTILE_SUB_BARRIER=0 (workgroup barriers, as before), two rounds.
# Predicted: S1024 D128 dK/dV 753 -> ~700 us, dQ 490 -> ~460 us, the whole
# backward 68.3 -> ~72 TFLOP/s (PyTorch 241.8: 0.28x -> 0.30x).
set -u
source scripts/device-env.sh
LIMIT=200 TAIL=6 run "test_attention" $B/test_attention --test-threads 4
for r in 1 2; do
  for sb in 1 0; do
    LIMIT=90 TAIL=6 run "backward sub_barrier=$sb r$r" env WGTILE_SUB_BARRIER=$sb $B/attention --sizes 1024,4096 --dims 128 --repeats 5 --backward-only
  done
done
LIMIT=120 TAIL=4 run "backward sweep" $B/attention --sizes 1024 --dims 128 --repeats 5 --sweep-backward
LIMIT=60 TAIL=40 run "stats" $B/pipeline_stats --attention --filter "AttentionBwdCoop"
