#!/usr/bin/env bash
# Session 15, run 6: what the driver made of every kernel as committed
# (registers, local memory = spills, shared memory), matmul and attention
# (run 96 found a register cliff in the decode kernel: 128 with spills
# against 168 without, 4 against 3 workgroups per SM). For the next
# sessions: which hot kernels spill, which sit at a cliff.
set -u
source scripts/device-env.sh
LIMIT=120 TAIL=400 run "stats matmul" $B/pipeline_stats
LIMIT=120 TAIL=400 run "stats attention" $B/pipeline_stats --attention
