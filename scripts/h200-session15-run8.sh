#!/usr/bin/env bash
# Session 15, run 8: the tensor-core backward's dQ kernel without its
# register prefetch (WGTILE_BWD_DQ_PREFETCH=0: the next K/V block fetched
# and put after the products). Run 98: at D64 the dQ kernel (4 subgroups,
# 128 invocations) has 130 registers, 2 past 128: 3 workgroups per SM
# instead of 4. Prediction: at D64 ~122 registers, 4 per SM, dQ faster by
# up to 1.3x if the loads' latency hides behind the other workgroups
# (backward +5-15%); at D128 (8 subgroups, 204 registers, 1 per SM
# either way) the exposed latency costs a few %. Registers first.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=400 run "stats" $B/pipeline_stats --attention
for r in 1 2; do
  for pf in 1 0; do
    LIMIT=120 TAIL=10 run "backward prefetch $pf r$r" env WGTILE_BWD_DQ_PREFETCH=$pf $B/attention --backward-only --sizes 1024,4096 --dims 128,64
  done
done
